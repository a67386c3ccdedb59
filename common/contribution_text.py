"""A site's contribution aggregates in words: the operator's view (``analyst status``) and the
site's own (``participant status``) read the same way (:mod:`analyst.contributions` measures
them; issue 29, item 3)."""

from __future__ import annotations

from typing import Any


def aggregate_text(part: dict[str, Any]) -> str:
    """One site's aggregates in words (the operator's and the site's view alike)."""
    received, given = part["received"], part["given"]
    texts = [f"received {_mean_text(received)}"]
    if given is not None and "withheld" not in given:
        texts.append(f"gave {_mean_text(given)}, made {given['made_worse']} worse and "
                     f"{given['made_better']} better")
    elif given is not None:
        texts.append(f"gave: withheld ({given['withheld']})")
    else:
        texts.append("gave: not measured (not among the sites left out)")
    if part["harms_others"]:
        texts.append("HARMS THE OTHERS: most sites are better without its rows")
    return "; ".join(texts)


def _mean_text(agg: dict[str, Any]) -> str:
    if "withheld" in agg:
        return f"withheld ({agg['withheld']})"
    if agg["mean"] is None:
        return "nothing measured"
    return f"{agg['mean']:+.3f} per site over {agg['sites']} (sum {agg['sum']:+.3f})"


def site_line(view: dict[str, Any] | None) -> str | None:
    """``participant status``'s line about the site's own contribution view (None when the
    site model carries none)."""
    if view is None:
        return None
    if not view.get("computed"):
        return f"contribution: not measured: {view.get('reason')}"
    return ("contribution (leave-one-site-out: balanced accuracy with a site's rows minus "
            "without them, received on this site's test rows, given on the others', one site "
            f"at a time, so not the gain of joining): {aggregate_text(view)}")
