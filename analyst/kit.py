"""What an operator asks of the analyst's kit on disk, with the analyst running or not
(``noisyanchor analyst status`` and ``noisyanchor analyst deadline``).

* :func:`store_progress`: the federation's progress read from the store (who published a key,
  who committed to the anchor, whose upload is in, withdrawals, the result): the same view as a
  site's ``participant status``. Files of the store are only ever replaced atomically, so they
  are read as they are, without the running analyst's lock.
* :func:`extend_deadline`: a later ``[federation] deadline`` written into the kit's config
  (the rest of the file kept as it is) and into the store (:mod:`analyst.live_deadline`),
  refused once the federation is done. A running analyst applies it at once, without a
  restart, and sites that wait follow it (they read the deadline the analyst declares in its
  Status replies).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from noisyanchor.analyst.config import AnalystConfig, load_analyst_config
from noisyanchor.analyst.federation import FAILED_FILE, WITHDRAWN_DIR
from noisyanchor.analyst.live_deadline import deadlines, write_deadline
from noisyanchor.analyst.storage import LOCK_FILE, Store, serving_pid
from noisyanchor.common.durations import human_duration, human_time, parse_deadline
from noisyanchor.common.errors import (
    AnalystUnavailableError,
    ConfigError,
    InvalidInputError,
    PreconditionError,
)
from noisyanchor.common.files import fsync_dir, stale_prefix
from noisyanchor.common.progress import Progress
from noisyanchor.common.text import MAX_PEER_TEXT, peer_text

log = logging.getLogger(__name__)


def _names(folder: Path, suffix: str) -> tuple[str, ...]:
    return tuple(sorted(p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}")))


def store_progress(cfg: AnalystConfig) -> Progress:
    """The progress of ``cfg``'s federation as its store holds it.

    The state is ``done`` with a result, ``failed`` after a failed alignment (it runs again at
    the analyst's next start), ``aligning`` once every upload is in, else ``collecting``.
    """
    store = Store(cfg.output_dir).check_private()
    committed = tuple(p for p in cfg.participants if p in _names(store.uploads, ".bundle"))
    error = ""
    if (store.result / "result.json").is_file():
        state = "done"
    elif (store.root / FAILED_FILE).is_file():
        state = "failed"
        error = json.loads(store.read(store.root / FAILED_FILE)).get("error", "")
    else:
        state = "aligning" if len(committed) == len(cfg.participants) else "collecting"
    agreement = cfg.method_enum.uses_anchor or cfg.method_enum.shared_key
    withdrawn_dir = store.root / WITHDRAWN_DIR
    withdrawn = {pid: peer_text(store.read(withdrawn_dir / f"{pid}.txt", 4 * MAX_PEER_TEXT)
                                .decode(errors="replace"), MAX_PEER_TEXT)
                 for pid in cfg.participants if (withdrawn_dir / f"{pid}.txt").is_file()}
    result = (json.loads(store.read(store.result / "result.json")) if state == "done"
              else None)
    return Progress(
        cfg.federation_id, state, cfg.participants, committed,
        _names(store.keys, ".pb") if agreement else None,
        _names(store.commitments, ".bin") if agreement else None,
        cfg.dealer, withdrawn, error, result, *deadlines(cfg.deadline, store.root))


#: Seconds between two looks at the store while waiting, and between two progress lines.
POLL_SECONDS, REPORT_EVERY = 0.5, 10.0

#: Seconds :func:`wait_for_outcome` waits for the alignment once every upload is in.
ALIGN_WAIT = 3600.0

#: Seconds it waits for the uploads when the federation has no deadline (sites wait 1 h).
NO_DEADLINE_WAIT = 3600.0

#: Seconds :func:`wait_for_outcome` goes on while no analyst process serves the store: long
#: enough for one being started beside it to take the store, short enough that an analyst that
#: never started (or crashed) is said at once rather than after the deadline.
NO_ANALYST_WAIT = 60.0


def wait_for_outcome(cfg: AnalystConfig, timeout: float | None = None) -> Progress:
    """Watch the store until the federation is done or failed or a site withdrew, logging
    whom it waits for whenever that changes (and every :data:`REPORT_EVERY` seconds).

    Without ``timeout`` it waits while the sites may still come (until the deadline, or
    :data:`NO_DEADLINE_WAIT` without one) and then, once every upload is in,
    :data:`ALIGN_WAIT` for the alignment. Returns the last progress seen (its state says
    whether the wait ended with the outcome).
    """
    started = time.monotonic()
    last, reported, aligning_since, served_at = None, started, None, started
    limit = started + (timeout if timeout is not None else NO_DEADLINE_WAIT)
    while True:
        progress = store_progress(cfg)
        if progress.state in ("done", "failed") or progress.withdrawn:
            return progress
        now = time.monotonic()
        if serving_pid(cfg.output_dir) is not None:
            served_at = now
        elif now - served_at >= NO_ANALYST_WAIT:
            raise AnalystUnavailableError(
                f"no analyst serves the store {cfg.output_dir} (no live process has held its "
                f"{LOCK_FILE} for {human_duration(now - served_at)}), so the federation cannot "
                f"move on; start it with `noisyanchor analyst serve --config <this config>`")
        if timeout is None and aligning_since is None and progress.deadline is not None:
            # read at every look: a deadline extended meanwhile is waited for
            limit = now + max(0.0, progress.deadline.timestamp() - time.time())
        if progress.state == "aligning" and aligning_since is None:
            aligning_since = now
            if timeout is None:  # every upload is in: the alignment may outlast the deadline
                limit = max(limit, now + ALIGN_WAIT)
        waiting = progress.pending() or "the analyst to align every upload"
        if waiting != last or now - reported >= REPORT_EVERY:
            log.info("waiting for %s (%s so far)", waiting, human_duration(now - started))
            last, reported = waiting, now
        if now >= limit:
            return progress
        time.sleep(min(POLL_SECONDS, max(0.0, limit - now)))


@dataclass(frozen=True)
class Extended:
    """A moved deadline: the config file, the federation, the old (None: none) and new one."""

    config: Path
    federation_id: str
    before: dt.datetime | None
    after: dt.datetime


#: The ``deadline = ...`` line of a config's ``[federation]`` table (value and comment apart).
_DEADLINE_LINE = re.compile(r"^(\s*deadline\s*=\s*)(\S+(?:[ T]\S+)?)(\s*(?:#.*)?)$")


def _with_deadline(text: str, deadline: dt.datetime) -> str:
    """``text`` (an analyst config) with ``[federation] deadline`` set to ``deadline``; every
    other line as it was."""
    lines = text.splitlines()
    value = deadline.isoformat()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("[federation]")),
                 None)
    if start is None:
        raise ConfigError("the config has no [federation] table")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
               len(lines))
    for i in range(start + 1, end):
        if match := _DEADLINE_LINE.match(lines[i]):
            lines[i] = f"{match.group(1)}{value}{match.group(3)}"
            break
    else:
        lines.insert(start + 1, f"deadline = {value}")
    return "\n".join(lines) + "\n"


def extend_deadline(config_path: Path, when: str, now: dt.datetime | None = None) -> Extended:
    """Move the federation's deadline in the analyst's config to ``when`` (``"in 3 days"`` or a
    date-time with an offset, :func:`common.durations.parse_deadline`).

    Refused, changing nothing, when the federation is done (its result is in the store), when
    ``when`` is not after now, or not after the current deadline (sites may be waiting for it).
    """
    config_path = Path(config_path)
    cfg = load_analyst_config(config_path)
    now = now or dt.datetime.now(dt.UTC)
    progress = store_progress(cfg)
    if progress.state == "done":
        raise PreconditionError(
            f"federation {cfg.federation_id!r} is done (result in {cfg.output_dir / 'result'}): "
            "its deadline no longer matters; a new pilot needs a new federation (provision a "
            "project with another [project] name)")
    after = parse_deadline(when, now)
    if after <= now:
        raise InvalidInputError(f"the new deadline {human_time(after, now)} is not in the "
                                "future")
    before = progress.deadline
    if before is not None and after <= before:
        raise InvalidInputError(f"the new deadline {human_time(after, now)} is not after the "
                                f"current one, {human_time(before, now)}: sites may be "
                                "waiting until then")
    _replace_checked(config_path, _with_deadline(config_path.read_text(), after), after)
    if cfg.output_dir.is_dir():  # an analyst ran on this store: it may be running now
        write_deadline(cfg.output_dir, after)
    return Extended(config_path, cfg.federation_id, before, after)


def _replace_checked(path: Path, text: str, deadline: dt.datetime) -> None:
    """Replace the config at ``path`` by ``text`` once the analyst's reader finds ``deadline``
    in it: written beside it with the same mode (a container's user may need to read it),
    fsynced, then renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=stale_prefix(path), suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        if load_analyst_config(Path(tmp)).deadline != deadline:
            raise ConfigError(f"{path}: the new deadline line could not be read back; the "
                              "file is unchanged")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
