"""The federation's deadline as the running analyst applies it, moved without a restart.

``noisyanchor analyst deadline --extend`` writes the new deadline twice: into the analyst's
config (``[federation] deadline``, read at the next start) and into the store's
:data:`DEADLINE_FILE` (replaced atomically). The running analyst reads that file at every
deadline check and every Status and FederationInfo answer, so the deadline ``analyst status``
shows is the one the analyst enforces and the one waiting sites follow (they read it from the
Status replies). The later of the two counts: the config's may have been moved by hand and the
file's only ever moves later.

A config edited by hand while the analyst runs applies at its next start only:
:func:`deadlines` tells the deadline in force (the one the analyst started with, or moved
since) from the one pending in the config, so that ``analyst status`` shows both.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from noisyanchor.analyst.core.store import FEDERATION_FILE
from noisyanchor.common.durations import parse_deadline
from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.files import atomic_write

#: File of the store holding a deadline moved while the analyst may run.
DEADLINE_FILE = "deadline.json"


def stored_deadline(store_root: Path) -> dt.datetime | None:
    """The deadline in ``store_root``'s :data:`DEADLINE_FILE` (None: no such file).

    Raises
    ------
    ConfigError
        The file is not JSON with a ``deadline`` date-time with an offset, at most
        :data:`common.durations.MAX_AHEAD` from now.
    """
    path = Path(store_root) / DEADLINE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return parse_deadline(json.loads(text)["deadline"])
    except (ValueError, KeyError, TypeError, InvalidInputError) as err:
        raise ConfigError(f"{path}: key 'deadline': not a deadline ({err}); write it again "
                          "with noisyanchor analyst deadline --extend") from err


def write_deadline(store_root: Path, deadline: dt.datetime) -> None:
    """Record ``deadline`` for the running analyst in ``store_root`` (atomically)."""
    atomic_write(Path(store_root) / DEADLINE_FILE,
                 json.dumps({"deadline": deadline.isoformat(),
                             "deadline_unix": deadline.timestamp()}).encode())


def effective_deadline(configured: dt.datetime | None, store_root: Path) -> dt.datetime | None:
    """The deadline in force: the later of the config's (``configured``) and the store's."""
    stored = stored_deadline(store_root)
    if stored is None or configured is None:
        return stored or configured
    return max(stored, configured)


def deadlines(configured: dt.datetime | None,
              store_root: Path) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The deadline in force and the one pending (None: nothing pending) for a config whose
    ``[federation] deadline`` is now ``configured``.

    In force: the deadline the analyst last started with (its store's
    :data:`analyst.storage.FEDERATION_FILE`), or a later one extended since; before any
    start, the config's.
    Pending: the config's when it differs from the one in force (edited by hand since the
    start): it applies at the next start.
    """
    path = Path(store_root) / FEDERATION_FILE
    upcoming = effective_deadline(configured, store_root)
    try:
        started = json.loads(path.read_text()).get("deadline")
    except FileNotFoundError:
        return upcoming, None
    except (ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: not the analyst's federation description ({err})") from err
    running = effective_deadline(None if started is None else dt.datetime.fromisoformat(started),
                                 store_root)
    return running, (upcoming if upcoming != running else None)
