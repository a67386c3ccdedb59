"""Data sets the bench runs on: scikit-learn's bundled handwritten digits (real, offline) and a
synthetic Gaussian mixture.

Features are scaled to unit range; labels are integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import InvalidInputError
from common.validation import check_count

DATASETS = ("digits", "synthetic")


@dataclass(frozen=True)
class Dataset:
    """Records ``X`` (``n x d_in``) with labels ``y`` (``n``) and a name."""

    name: str
    x: np.ndarray
    y: np.ndarray


def load_digits() -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1,797 records, 64 features), pixels / 16."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError as err:  # pragma: no cover - depends on the install
        raise InvalidInputError("the digits data set needs scikit-learn: "
                                "pip install 'noisyanchor[eval]'") from err
    bunch = sk_load_digits()
    return Dataset("digits", bunch.data.astype(np.float64) / 16.0, bunch.target.astype(np.int64))


def make_synthetic(
    rng: np.random.Generator, *, n: int = 2000, d: int = 32, classes: int = 5, spread: float = 1.5
) -> Dataset:
    """Gaussian mixture: ``classes`` unit-variance clusters with means ``N(0, spread^2 I_d)``."""
    n = check_count(n, "n", minimum=classes)
    d = check_count(d, "d", minimum=1)
    classes = check_count(classes, "classes", minimum=2)
    means = spread * rng.standard_normal((classes, d))
    y = np.arange(n) % classes
    rng.shuffle(y)
    return Dataset("synthetic", means[y] + rng.standard_normal((n, d)), y.astype(np.int64))


def load_dataset(name: str, rng: np.random.Generator) -> Dataset:
    """Dataset by name (``digits`` or ``synthetic``); ``rng`` drives synthetic generation."""
    if name == "digits":
        return load_digits()
    if name == "synthetic":
        return make_synthetic(rng)
    raise InvalidInputError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
