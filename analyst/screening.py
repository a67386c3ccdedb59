"""The analyst's screening of the committed uploads before alignment, and what its policy does
with a site the checks name (``[federation] screening``).

- ``refuse`` (default): nothing is aligned. The named site's upload is discarded and the site
  is recorded as out with the reason (every site's and the operator's status show it, as a
  withdrawal); once it fixes its table and runs ``participant upload`` again, the federation
  screens again and goes on.
- ``exclude``: the federation is aligned and fitted without the named sites, as if they had
  never been part of it; everyone is told in ``result.json`` (``screening``) and the status.
- ``accept``: the federation goes on with every site; the findings are recorded.

The checks themselves are :mod:`common.scale_check` (pure math on ``Y_i`` and ``B_i``).

References: issue 29, item 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.common.gdp import gaussian_projection
from noisyanchor.common.scale_check import Screening, box_diameter, screen

#: First words of the withdrawal a refused site is recorded with (status, the log).
REFUSED = "its upload was refused by the analyst's screening before alignment"


@dataclass(frozen=True)
class Decision:
    """What the policy made of a screening.

    Attributes
    ----------
    policy : str
    screening : Screening
    included : tuple of str
        The sites aligned (config order).
    excluded, refused : tuple of str
        Sites left out of this alignment (``exclude``), or whose upload is discarded until they
        upload again (``refuse``).
    """

    policy: str
    screening: Screening
    included: tuple[str, ...]
    excluded: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """``result.json``'s ``screening``: ``policy``, ``findings`` (``site``, ``check``,
        ``measured``, ``bound``, ``reason``), ``flagged``, ``excluded``, ``checks`` run,
        ``skipped`` with why."""
        return {"policy": self.policy, **self.screening.to_json(),
                "excluded": list(self.excluded)}

    def site_text(self, pid: str) -> str:
        """What ``pid`` and every other site are told about ``pid``: the reasons, and how to
        come back under ``refuse``."""
        reasons = "; ".join(self.screening.reasons(pid))
        if pid in self.refused:
            return (f"{REFUSED}: {reasons}. {pid}: fix the table (the column's unit; "
                    "'noisyanchor schema check' names columns outside their declared range) "
                    "and run 'noisyanchor participant upload' again; the federation then "
                    "goes on")
        what = "excluded from the alignment" if pid in self.excluded else "accepted"
        return f"named by the analyst's screening before alignment ({what}): {reasons}"


def screen_uploads(cfg: AnalystConfig, data: Mapping[str, np.ndarray],
                   anchors: Mapping[str, np.ndarray] | None) -> Screening:
    """Run :func:`common.scale_check.screen` on the uploads ``Y_i`` (and ``B_i``) with what the
    federation declares: the typed schema's box (times ``||F||_2`` of the public projection),
    the noise levels ``sigma`` and ``v``, the reference site."""
    sites = list(data)
    tabular = cfg.schema.tabular if cfg.schema is not None else None
    diameter, why, norm = None, "the federation declares no typed schema with public ranges", 1.0
    if tabular is not None:
        diameter, why = box_diameter(tabular)
        if cfg.dim is not None:
            if cfg.projection_seed is None:
                diameter, why = None, "the public projection's seed is not declared"
            else:
                norm = float(np.linalg.norm(gaussian_projection(
                    tabular.width, cfg.dim, np.random.default_rng(cfg.projection_seed)), 2))
    reference = sites.index(cfg.reference) if cfg.reference in sites else 0
    return screen(sites, [data[s] for s in sites],
                  None if anchors is None else [anchors[s] for s in sites],
                  method=cfg.method, diameter=diameter, no_box=why, projection_norm=norm,
                  sigma=cfg.sigma, v=cfg.v, reference=reference)


def decide(policy: str, participants: Sequence[str], screening: Screening) -> Decision:
    """The sites aligned, excluded or refused under ``policy``."""
    flagged = screening.flagged
    if policy == "accept" or not flagged:
        return Decision(policy, screening, tuple(participants))
    included = tuple(p for p in participants if p not in flagged)
    if policy == "exclude":
        return Decision(policy, screening, included, excluded=tuple(
            p for p in participants if p in flagged))
    return Decision(policy, screening, (), refused=tuple(p for p in participants
                                                          if p in flagged))
