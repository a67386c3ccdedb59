"""The participant's computation of its one upload, shared by the participant process and the
in-process simulator so both produce identical bytes from identical seeds.

References: SPEC.md section 1 (Table 1).
"""

from __future__ import annotations

import numpy as np

from noisyanchor.common.anchor_distribution import check_protocol_anchor
from noisyanchor.common.gdp import (
    DEFAULT_TRANSLATION_SCALE,
    anchor_from_seed,
    key_from_seed,
    sample_key,
)
from noisyanchor.common.methods import Method, SecretState, Upload, make_upload


def compute_upload(
    method: Method | str,
    x: np.ndarray,
    rng: np.random.Generator,
    *,
    shared_seed: bytes | None,
    anchors: int,
    sigma: float = 0.0,
    v: float = 0.0,
    translation_scale: float = DEFAULT_TRANSLATION_SCALE,
    anchor: np.ndarray | None = None,
) -> tuple[Upload, SecretState]:
    """Participant ``i``'s upload ``(Y_i, B_i)`` and secret state from its working data.

    Parameters
    ----------
    method : Method or str
    x : (n_i, d) ndarray
        ``X_i F`` (``X_i`` without a public projection).
    rng : numpy.random.Generator
        The participant's private generator (OS entropy, or a seed for experiments): its key
        ``(O_i, Psi_i)`` is drawn first, then the noise ``W_i``.
    shared_seed : bytes or None
        The dealer's 256-bit seed: the anchor ``A`` (``r x d``) and the common C-GDP key derive
        from it. Needed by every method except I-GDP.
    anchors : int
        ``r``.
    sigma, v, translation_scale : float
        Private-data noise, anchor noise, scale ``s`` of ``Psi_i ~ N(0, s^2 I)``.
    anchor : (r, d) ndarray, optional
        An anchor handed over instead of derived from ``shared_seed`` (the threat bench's dealer
        of a crafted anchor). Every anchor, derived or handed over, must pass the protocol's
        distribution tests (:func:`common.anchor_distribution.check_protocol_anchor`), else
        :class:`~common.errors.IntegrityError` names the failed test.
    """
    method = Method.parse(method)
    d = np.shape(x)[1]
    if method.shared_key:
        key = key_from_seed(shared_seed, d, translation_scale=translation_scale)
    else:
        key = sample_key(d, rng, translation_scale=translation_scale)
    if method.uses_anchor:
        # Cheap (O(r d^2)) and refuses a dealer's crafted anchor before anything is uploaded.
        anchor = check_protocol_anchor(anchor_from_seed(shared_seed, anchors, d)
                                       if anchor is None else anchor)
    else:
        anchor = None
    return make_upload(method, x, key, anchor=anchor, sigma=sigma, v=v, rng=rng)
