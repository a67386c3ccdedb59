"""Geometric data perturbation (GDP): Haar rotations, translations, the shared anchor, and the
public projections ``F``.

References: SPEC.md section 1; noisy-anchor GDP paper, Sections 2 and 5.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import as_matrix, check_anchor_rows, check_count, check_positive

#: Default standard deviation ``s`` of the secret translation ``Psi_i ~ N(0, s^2 I)``: large
#: compared with unit-scale data so the translation is not guessable.
DEFAULT_TRANSLATION_SCALE = 100.0


def secret_rng(seed: int | None = None) -> np.random.Generator:
    """Generator for secret draws: OS entropy unless an explicit ``seed`` is given.

    ``numpy.random.default_rng(None)`` seeds a ``SeedSequence`` from ``secrets``-grade OS entropy;
    an explicit seed exists only for reproducible experiments.
    """
    return np.random.default_rng(seed)


def rng_from_bytes(seed: bytes, purpose: str) -> np.random.Generator:
    """Deterministic generator derived from a 256-bit shared ``seed`` and a ``purpose`` label.

    The label separates the streams derived from one seed (anchor, common C-GDP secret), so that
    learning one stream says nothing about another.
    """
    if not isinstance(seed, bytes | bytearray) or len(seed) < 16:
        raise InvalidInputError("seed must be at least 16 bytes (256 bits recommended)")
    digest = hashlib.sha256(b"noisyanchor/" + purpose.encode() + b"/" + bytes(seed)).digest()
    words = np.frombuffer(digest, dtype="<u4").tolist()
    return np.random.default_rng(np.random.SeedSequence(words))


def haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-random ``O in O(d)``: QR of a Gaussian matrix with signs fixed so ``diag(R) > 0``.

    Parameters
    ----------
    d : int
    rng : numpy.random.Generator

    Returns
    -------
    O : (d, d) ndarray, ``O^T O = I``.
    """
    d = check_count(d, "d", minimum=1)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def sample_translation(
    d: int, rng: np.random.Generator, *, scale: float = DEFAULT_TRANSLATION_SCALE
) -> np.ndarray:
    """Secret translation ``Psi_i ~ N(0, scale^2 I_d)``."""
    d = check_count(d, "d", minimum=1)
    return check_positive(scale, "scale") * rng.standard_normal(d)


@dataclass(frozen=True)
class GdpKey:
    """One participant's secret GDP map ``M(S) = S O + 1 Psi^T``.

    Attributes
    ----------
    rotation : (d, d) ndarray
        ``O`` (Haar-random orthogonal).
    translation : (d,) ndarray
        ``Psi``.
    """

    rotation: np.ndarray
    translation: np.ndarray

    @property
    def dim(self) -> int:
        """Working dimension ``d``."""
        return self.rotation.shape[0]


def sample_key(
    d: int, rng: np.random.Generator, *, translation_scale: float = DEFAULT_TRANSLATION_SCALE
) -> GdpKey:
    """Draw a secret GDP key ``(O, Psi)`` from ``rng``."""
    return GdpKey(haar_orthogonal(d, rng), sample_translation(d, rng, scale=translation_scale))


def gdp_map(s: np.ndarray, key: GdpKey) -> np.ndarray:
    """Apply ``M(S) = S O + 1 Psi^T`` to the rows of ``S`` (``n x d``)."""
    s = as_matrix(s, "S", cols=key.dim)
    return s @ key.rotation + key.translation


def make_anchor(r: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Shared synthetic anchor ``A`` (``r x d``, ``r >= d + 1``).

    ``Omega ~ N(0,1)^{r x d}``, thin QR of ``H_r Omega`` with signs fixed so ``diag(R_A) > 0``,
    ``A = Q``. Then ``1^T A = 0`` and ``A^T A = I_d`` (SPEC.md section 1).
    """
    d = check_count(d, "d", minimum=1)
    r = check_count(r, "r", minimum=1)
    check_anchor_rows(r, d, "the anchor needs")
    omega = rng.standard_normal((r, d))
    q, rr = np.linalg.qr(omega - omega.mean(axis=0))
    return q * np.where(np.diag(rr) < 0, -1.0, 1.0)


def anchor_from_seed(seed: bytes, r: int, d: int) -> np.ndarray:
    """The anchor derived deterministically from the shared 256-bit anchor seed."""
    return make_anchor(r, d, rng_from_bytes(seed, "anchor"))


def key_from_seed(
    seed: bytes, d: int, *, translation_scale: float = DEFAULT_TRANSLATION_SCALE
) -> GdpKey:
    """The common C-GDP key ``(O, Psi)`` derived deterministically from the shared seed."""
    return sample_key(d, rng_from_bytes(seed, "common-key"), translation_scale=translation_scale)


def gaussian_projection(d_in: int, h: int, rng: np.random.Generator) -> np.ndarray:
    """Public Gaussian projection ``F`` (``d_in x h``, ``F_kl ~ N(0, 1)``; MNIST protocol)."""
    d_in = check_count(d_in, "d_in", minimum=1)
    h = check_count(h, "h", minimum=1)
    return rng.standard_normal((d_in, h))


def pool_projection(pool: np.ndarray, h: int) -> np.ndarray:
    """Public projection from a public pool (CelebA protocol): top-``h`` right singular vectors
    of the *uncentered* pool, so ``F^T F = I_h``.

    Parameters
    ----------
    pool : (m, d_in) ndarray
        Public records, disjoint from every participant.
    h : int
        Target width, ``h <= min(m, d_in)``.
    """
    pool = as_matrix(pool, "pool")
    h = check_count(h, "h", minimum=1)
    if h > min(pool.shape):
        raise InvalidInputError(f"h={h} exceeds min(pool.shape)={min(pool.shape)}")
    _, _, vt = np.linalg.svd(pool, full_matrices=False)
    return vt[:h].T


def decode(x_hat: np.ndarray, f: np.ndarray | None) -> np.ndarray:
    """Decode a working-space estimate back to input space with ``F^+`` (identity if no F)."""
    if f is None:
        return x_hat
    return x_hat @ np.linalg.pinv(as_matrix(f, "F"))

