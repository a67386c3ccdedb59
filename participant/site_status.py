"""``participant status`` from what the site keeps, for when the analyst is unreachable (issue
34, item 3): the receipt of its upload, its own withdrawal, the kept site model and its age, the
gain from ``gain.json``, and the analyst's last answer with its time
(:mod:`participant.local_state`).

The JSON has the keys of the analyst's answer (from its last kept answer, else null) and
those this module adds to both: ``analyst_reachable``, ``source`` (``"analyst"`` or
``"local"``), ``analyst``, ``as_of`` (when the analyst's part was answered), ``unreachable``
(why and when it was tried) and what the site keeps (``upload_receipt``, ``withdrawal``,
``site_model``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

from noisyanchor.common.durations import human_time
from noisyanchor.common.errors import AnalystUnavailableError, InvalidInputError
from noisyanchor.participant.config import ParticipantConfig
from noisyanchor.participant.local_state import (
    UploadReceipt,
    file_age,
    load_last_status,
    load_receipt,
    load_withdrawal,
)
from noisyanchor.participant.predict import SITE_MODEL_FILE


def _or_error(load) -> Any:
    """``load()``, or ``{"error": ...}`` naming the unreadable file: one bad file does not
    hide the rest of a status."""
    try:
        return load()
    except InvalidInputError as err:
        return {"error": str(err)}


def site_holdings(cfg: ParticipantConfig) -> dict[str, Any]:
    """What the site keeps of its federation: its upload's receipt, its own standing
    withdrawal and the site model's age (each None, or ``{"error": ...}``, when not kept or
    unreadable)."""
    receipt = _or_error(lambda: load_receipt(cfg))
    return {"upload_receipt": asdict(receipt) if isinstance(receipt, UploadReceipt) else receipt,
            "withdrawal": _or_error(lambda: load_withdrawal(cfg)),
            "site_model": file_age(cfg.state_dir / SITE_MODEL_FILE)}


def reach(cfg: ParticipantConfig, *, as_of: str | None,
          unreachable: dict[str, Any] | None = None) -> dict[str, Any]:
    """Where the status comes from: the analyst now, or (``unreachable``) the state folder."""
    return {"analyst_reachable": unreachable is None,
            "source": "analyst" if unreachable is None else "local", "analyst": cfg.analyst,
            "as_of": as_of, "unreachable": unreachable}


def analyst_keys() -> tuple[str, ...]:
    """The keys of the analyst's part of ``participant status --json``."""
    from noisyanchor.common.progress import Progress
    from noisyanchor.participant.cli import analyst_answer
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    nothing = Progress("", "", (), (), None, None, None, {}, "", None, None)
    return tuple(analyst_answer(pb.StatusReply(), nothing))


def local_status(cfg: ParticipantConfig, err: AnalystUnavailableError, tried_at: str,
                 connect_seconds: float) -> dict[str, Any]:
    """The status the site can give without the analyst (``gain`` and ``contribution`` are
    the caller's): the analyst's last kept answer (its keys null when there is none), where
    it comes from and what the site keeps.

    Raises
    ------
    AnalystUnavailableError
        ``err``, saying so, when the site keeps nothing of this federation to show.
    """
    last = _or_error(lambda: load_last_status(cfg))
    answered = last if isinstance(last, tuple) else None
    held = site_holdings(cfg)
    if answered is None and not held["upload_receipt"] and not held["withdrawal"] \
            and not held["site_model"]["kept"]:
        raise AnalystUnavailableError(f"{err}; {cfg.id} keeps nothing of federation "
                                      f"{cfg.federation_id!r} in {cfg.state_dir} to show yet")
    analyst = dict.fromkeys(analyst_keys()) | (answered[1] if answered else {})
    unreachable = {"address": cfg.analyst, "tried_at": tried_at,
                   "connect_seconds": connect_seconds, "reason": str(err)}
    if isinstance(last, dict):  # the kept answer is unreadable: said, not hidden
        unreachable["last_status_error"] = last["error"]
    return analyst | reach(cfg, as_of=answered[0] if answered else None,
                           unreachable=unreachable) | held


def _when(iso: str) -> str:
    return human_time(dt.datetime.fromisoformat(iso))


def _receipt_line(cfg: ParticipantConfig, receipt: dict[str, Any] | None) -> str:
    if receipt is None:
        return f"no upload of {cfg.id} committed (no receipt kept)"
    if "error" in receipt:
        return f"upload receipt: {receipt['error']}"
    return (f"upload committed: receipt {receipt['receipt']}, received "
            f"{_when(receipt['received_at'])}; {receipt['records']} records, "
            f"{receipt['bytes']} bytes")


def _model_line(model: dict[str, Any]) -> str:
    if not model["kept"]:
        return ("no site model kept yet (fetched once the federation is done, by participant "
                "status or predict)")
    return f"site model kept in {model['path']}, fetched {_when(model['written_at'])}"


def _last_answer_line(status: dict[str, Any]) -> str:
    if status["as_of"] is None:
        return "the analyst has not answered a status of this site before"
    line = (f"the analyst's last answer, {_when(status['as_of'])}: federation "
            f"{status['federation_id']} {status['state']}, committed "
            f"{', '.join(status['committed']) or 'none'} of {', '.join(status['expected'])}")
    withdrawn = status.get("withdrawn") or {}
    pairs = (withdrawn.items() if isinstance(withdrawn, dict)
             else ((w["participant_id"], w["reason"]) for w in withdrawn))
    withdrawn = "; ".join(f"{who}: {why}" for who, why in pairs)
    return line + (f"; withdrawn: {withdrawn}" if withdrawn else "")


def local_lines(cfg: ParticipantConfig, status: dict[str, Any]) -> list[str]:
    """:func:`local_status` as text (the gain and contribution lines are the caller's)."""
    gone = status["unreachable"]
    lines = [f"{gone['reason']}; tried {_when(gone['tried_at'])}",
             f"what {cfg.id} keeps in {cfg.state_dir}, shown without the analyst:",
             _receipt_line(cfg, status["upload_receipt"])]
    if (withdrawal := status["withdrawal"]) is not None:
        lines.append(f"withdrawal: {withdrawal['error']}" if "error" in withdrawal else
                     f"withdrew {_when(withdrawal['at'])}: {withdrawal['reason']}")
    lines.append(_model_line(status["site_model"]))
    lines.append(_last_answer_line(status))
    if "last_status_error" in gone:
        lines.append(f"the analyst's last answer: {gone['last_status_error']}")
    return lines

