"""What one site may see of the federation's results: its own and the federation's, never
another site's.

The one rule, for every output that reaches a site (the Status reply, the site model file, the
participant's status text and JSON): per-site results live in mappings keyed by the site's id
(``result.json``'s ``row_ranges``, ``site_models``, ``model.sites``, and any mapping added later,
such as a site-by-site matrix), so :func:`visible_to` walks the whole object and, in every
mapping at any depth, keeps the keys that are not a site id and the site's own key, and drops
every other site's key. It is an allow-list by structure: a new per-site field keyed by site id
is filtered without a change here. A value that names a site (``committed``, a screening
verdict naming the flagged site) is federation progress, which every site is told, and stays.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any


def visible_to(value: Any, site: str, sites: Collection[str]) -> Any:
    """``value`` (a JSON-like object) as ``site`` may see it: every mapping without the keys of
    the other ``sites``, at every depth."""
    others = frozenset(sites) - {site}
    return _without(value, others)


def _without(value: Any, others: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, others) for k, v in value.items() if k not in others}
    if isinstance(value, list | tuple):
        return [_without(v, others) for v in value]
    return value


def visible_json(text: str, site: str, sites: Collection[str]) -> str:
    """A JSON document (``result.json``) as ``site`` may see it; empty stays empty."""
    if not text:
        return text
    return json.dumps(visible_to(json.loads(text), site, sites), indent=2)
