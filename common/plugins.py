"""Plug-ins registered by other packages through Python entry points.

A researcher's package adds an attack or an auditor by declaring an entry point, e.g. in its
``pyproject.toml``::

    [project.entry-points."noisyanchor.attacks"]
    my_attack = "my_package.attacks:my_attack"

    [project.entry-points."noisyanchor.auditors"]
    my_auditor = "my_package.auditors:fit_my_auditor"

The entry point's name is the name the attack or auditor gets in every JSON, table and figure.
The interfaces are documented where they are used: :mod:`common.attacks` (attacks) and
:mod:`experiments.auditors` (auditors).
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from typing import Any

from noisyanchor.common.errors import InvalidInputError

#: Entry-point group of plug-in attacks.
ATTACK_GROUP = "noisyanchor.attacks"
#: Entry-point group of plug-in auditors.
AUDITOR_GROUP = "noisyanchor.auditors"
#: Names a plug-in may take (they become JSON keys and file names).
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def load_plugins(group: str, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every object registered under the entry-point ``group``, by entry-point name, sorted.

    Raises
    ------
    InvalidInputError
        When a plug-in cannot be imported, its name is not a plain identifier-like word, or it
        reuses a built-in name in ``reserved``: the researcher who installed it should know,
        rather than see a run silently without their attack.
    """
    found: dict[str, Any] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        if not _NAME.match(ep.name):
            raise InvalidInputError(f"plug-in {ep.name!r} in group {group!r}: names must start "
                                    "with a letter and use letters, digits, '_', '.' or '-'")
        if ep.name in reserved or ep.name in found:
            raise InvalidInputError(f"plug-in {ep.name!r} ({ep.value}) in group {group!r} "
                                    "reuses a name that is already taken")
        try:
            found[ep.name] = ep.load()
        except Exception as err:  # any import-time failure of third-party code
            raise InvalidInputError(f"plug-in {ep.name!r} ({ep.value}) in group {group!r} "
                                    f"cannot be loaded: {type(err).__name__}: {err}") from err
    return found
