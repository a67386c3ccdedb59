"""Attacks of the analyst without a colluder: what the uploads leak to whoever holds them and a
little side knowledge (SPEC.md section 3, "Without a colluder").

* :mod:`.known_input`: ``m`` records of a target known to the attacker, located among the
  target's upload rows through the pairwise distances GDP preserves, then centred Procrustes.
* :mod:`.distance_match`: a pool of candidate records placed among the target's rows by their
  distances to located known records (exact under anchor noise), then the known-input decoder
  from every placed record; membership from distances alone.
* :mod:`.spectral`: spectral filtering of an upload against private-data noise (the principal
  directions above the noise edge), applied before decoding.
* :mod:`.ica`: FastICA on the upload alone (no side knowledge), exact up to estimation error
  when the attributes are independent and skewed.
* :mod:`.known_sample`: a public sample of the same population; principal axes matched with
  signs by skewness, refined by Wasserstein-Procrustes.

All read only a data upload ``Y_i`` (and, pooled, the analyst's aligned frame), so they apply
to every method, I-GDP included. :mod:`common.attacks` registers them beside the colluder's.
"""

from noisyanchor.common.analyst_attacks.distance_match import (
    DistanceMatchResult,
    distance_match_attack,
)
from noisyanchor.common.analyst_attacks.ica import IcaResult, ica_attack
from noisyanchor.common.analyst_attacks.known_input import (
    KnownInputResult,
    Location,
    decode_located,
    known_input_attack,
    locate_known_records,
)
from noisyanchor.common.analyst_attacks.known_sample import (
    KnownSampleResult,
    known_sample_attack,
)
from noisyanchor.common.analyst_attacks.spectral import SpectralFilter, spectral_filter

__all__ = ["DistanceMatchResult", "IcaResult", "KnownInputResult", "KnownSampleResult",
           "Location", "SpectralFilter", "decode_located", "distance_match_attack",
           "ica_attack", "known_input_attack", "known_sample_attack", "locate_known_records",
           "spectral_filter"]
