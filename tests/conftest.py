"""Shared test fixtures.

Tests run many small linear-algebra problems, often beside other processes: one BLAS thread per
process avoids OpenBLAS's busy-waiting threads slowing everything down under contention.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator: tests are reproducible."""
    return np.random.default_rng(20261129)
