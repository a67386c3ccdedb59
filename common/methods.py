"""The six GDP methods of the paper (Table 1) as the participant-side computation of one upload.

References: SPEC.md section 1; noisy-anchor GDP paper, Table 1 and Sections 2-4.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.gdp import GdpKey, gdp_map, secret_rng
from noisyanchor.common.validation import as_matrix, check_anchor_rows, check_nonnegative

#: Default anchor-noise level ``v`` of AA-I-GDP (anchor noise) wherever a command runs it without
#: an explicit ``v`` (``noisyanchor simulate``, ``noisyanchor demo``): low noise, about 0.2 v_PT
#: at their default sizes on digits (v_PT = 0.10 for p = 4 and 0.12 for p = 10, d = 64, r = 256),
#: so alignment is certified and the attacks' errors are visible but small.
DEFAULT_ANCHOR_NOISE = 0.02


class Method(enum.StrEnum):
    """The six methods; values are the command-line and wire names."""

    C_GDP = "c-gdp"
    C_GDP_PN = "c-gdp-pn"
    I_GDP = "i-gdp"
    AA_IGDP = "aa-igdp"
    AA_IGDP_PN = "aa-igdp-pn"
    AA_IGDP_AN = "aa-igdp-an"

    @classmethod
    def parse(cls, value: str | Method) -> Method:
        """Method from its name, with an error listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise InvalidInputError(f"unknown method {value!r}; expected one of {names}") from None

    @property
    def shared_key(self) -> bool:
        """C-GDP variants use one common ``(O, Psi)`` for every participant."""
        return self in (Method.C_GDP, Method.C_GDP_PN)

    @property
    def uses_anchor(self) -> bool:
        """AA-I-GDP variants upload an anchor representation ``B_i``."""
        return self in (Method.AA_IGDP, Method.AA_IGDP_PN, Method.AA_IGDP_AN)

    @property
    def data_noise(self) -> bool:
        """Private-data noise ``sigma W_i`` is added to ``Y_i``."""
        return self in (Method.C_GDP_PN, Method.AA_IGDP_PN)

    @property
    def anchor_noise(self) -> bool:
        """Anchor noise ``v W_i`` is added to ``B_i`` (the proposed method)."""
        return self is Method.AA_IGDP_AN

    @property
    def attacks(self) -> tuple[str, ...]:
        """Built-in attacks of SPEC.md section 3 that apply to this method (none for I-GDP;
        plug-in attacks may add more, :mod:`common.attacks`)."""
        if self.shared_key:
            return ("known_secret",)
        if self.uses_anchor:
            return ("known_anchor", "mp", "op", "am", "op_scaled", "known_anchor_recentered",
                    "ml")
        return ()


@dataclass(frozen=True)
class Upload:
    """What one participant sends, once.

    Attributes
    ----------
    data : (n_i, d) ndarray
        ``Y_i``.
    anchor : (r, d) ndarray or None
        ``B_i`` (AA-I-GDP variants only).
    """

    data: np.ndarray
    anchor: np.ndarray | None


@dataclass(frozen=True)
class SecretState:
    """A participant's full secret state (disclosed only by a colluder).

    Attributes
    ----------
    key : GdpKey
        ``(O_i, Psi_i)``.
    data_noise : (n_i, d) ndarray or None
        The realised ``sigma W_i`` added to ``Y_i``.
    anchor_noise : (r, d) ndarray or None
        The realised ``v W_i`` added to ``B_i``.
    """

    key: GdpKey
    data_noise: np.ndarray | None = None
    anchor_noise: np.ndarray | None = None


def check_sigma(method: Method | str, sigma: float) -> float:
    """``sigma`` (private-data noise level) as a float: finite, ``>= 0``, and ``0`` unless
    ``method`` adds private-data noise. Used by :func:`make_upload` and by the config readers."""
    method = Method.parse(method)
    sigma = check_nonnegative(sigma, "sigma")
    if sigma and not method.data_noise:
        raise InvalidInputError(f"sigma > 0 needs a private-data-noise method, not {method.value}")
    return sigma


def check_v(method: Method | str, v: float) -> float:
    """``v`` (anchor noise level) as a float: finite, ``>= 0``, and ``0`` unless ``method`` is
    the anchor-noise method. Used by :func:`make_upload` and by the config readers."""
    method = Method.parse(method)
    v = check_nonnegative(v, "v")
    if v and not method.anchor_noise:
        raise InvalidInputError(f"v > 0 needs method aa-igdp-an, not {method.value}")
    return v


def make_upload(
    method: Method | str,
    x: np.ndarray,
    key: GdpKey,
    *,
    anchor: np.ndarray | None = None,
    sigma: float = 0.0,
    v: float = 0.0,
    rng: np.random.Generator | None = None,
) -> tuple[Upload, SecretState]:
    """Compute participant ``i``'s upload ``(Y_i, B_i)`` from its data and secrets (Table 1).

    Parameters
    ----------
    method : Method or str
    x : (n_i, d) ndarray
        Private records ``X_i`` (already projected by the public ``F`` if one is used).
    key : GdpKey
        ``(O_i, Psi_i)``; for C-GDP variants the common ``(O, Psi)``.
    anchor : (r, d) ndarray, optional
        Shared anchor ``A`` (required for AA-I-GDP variants, ``r >= d + 1``).
    sigma : float
        Private-data noise level (``*-pn`` methods).
    v : float
        Anchor noise level (``aa-igdp-an``).
    rng : numpy.random.Generator, optional
        Source of the noise ``W_i``; OS entropy when omitted. Must be private to the participant.

    Returns
    -------
    upload : Upload
    state : SecretState
        The secrets and realised noise (to be kept only by a colluder).
    """
    method = Method.parse(method)
    d = key.dim
    x = as_matrix(x, "X", cols=d)
    sigma, v = check_sigma(method, sigma), check_v(method, v)
    rng = secret_rng() if rng is None else rng

    y = gdp_map(x, key)
    data_noise = sigma * rng.standard_normal(y.shape) if method.data_noise else None
    if data_noise is not None:
        y = y + data_noise

    b = anchor_noise = None
    if method.uses_anchor:
        if anchor is None:
            raise InvalidInputError(f"method {method.value} needs the shared anchor")
        anchor = as_matrix(anchor, "anchor", cols=d)
        check_anchor_rows(anchor.shape[0], d, "the anchor needs")
        b = gdp_map(anchor, key)
        if method.anchor_noise:
            anchor_noise = v * rng.standard_normal(b.shape)
            b = b + anchor_noise
    return Upload(y, b), SecretState(key, data_noise, anchor_noise)
