"""Split tags carried beside every uploaded row (train / validation / test)."""

TRAIN, VALIDATION, TEST = 0, 1, 2
SPLIT_NAMES = {TRAIN: "train", VALIDATION: "validation", TEST: "test"}
