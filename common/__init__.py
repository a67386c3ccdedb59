"""Math and wire helpers shared by the participant and the analyst (no server code).

References: docs/SPEC.md; the noisy-anchor GDP paper and the ScoreShield paper.
"""
