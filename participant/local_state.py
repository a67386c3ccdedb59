"""What a site holds in its state folder about its federation, read without the analyst: the
receipt of its committed upload, its own withdrawal, the analyst's last status answer and the
kept site model's age (``gain.json`` is :mod:`participant.gain`'s).

``participant status`` shows these when the analyst is unreachable, and a rerun of an upload
that already committed answers from the receipt at once instead of waiting for the analyst
(issue 34, item 3). Each file is JSON, written atomically (0600) into the 0700 state folder;
none holds a record, a key or another site's entry (the kept status is the one this site was
shown, :mod:`common.visibility`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_type_hints

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.files import atomic_write, private_dir
from noisyanchor.participant.config import ParticipantConfig


def now_iso() -> str:
    """The current UTC time, to the second, as ISO 8601 text (what every file here holds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def receipt_path(cfg: ParticipantConfig) -> Path:
    """Where the receipt of this site's committed upload is kept."""
    return cfg.state_dir / f"upload-receipt-{cfg.federation_id}.json"


def withdrawal_path(cfg: ParticipantConfig) -> Path:
    """Where this site's own standing withdrawal is kept."""
    return cfg.state_dir / f"withdrawal-{cfg.federation_id}.json"


def last_status_path(cfg: ParticipantConfig) -> Path:
    """Where the analyst's last status answer (as this site was shown it) is kept."""
    return cfg.state_dir / f"status-{cfg.federation_id}.json"


@dataclass(frozen=True)
class UploadReceipt:
    """The analyst's receipt for this site's upload, as the site received it.

    Attributes
    ----------
    federation_id, participant : str
    receipt : str
        The receipt (hex): the digest of the committed bundle the analyst returned.
    received_at : str
        When this site received it (ISO 8601, UTC).
    already_committed : bool
        The analyst answered a repeat of an upload committed earlier than ``received_at``.
    records, bytes : int
        Records and bytes of the upload.
    analyst : str
        The analyst's ``host:port``.
    """

    federation_id: str
    participant: str
    receipt: str
    received_at: str
    already_committed: bool
    records: int
    bytes: int
    analyst: str

    def received(self) -> dt.datetime:
        """``received_at`` as a timezone-aware time."""
        return dt.datetime.fromisoformat(self.received_at)


def _write_json(cfg: ParticipantConfig, path: Path, value: dict[str, Any]) -> Path:
    private_dir(cfg.state_dir)
    atomic_write(path, (json.dumps(value, indent=2) + "\n").encode())
    return path


def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None: no such file); anything else is refused naming the
    file and what it should hold."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInputError(f"{path}: cannot read {what} ({err})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidInputError(f"{path} does not hold {what}: not JSON ({err})") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{path} does not hold {what}: not a JSON object")
    return value


def keep_receipt(cfg: ParticipantConfig, receipt: UploadReceipt) -> Path:
    """Keep the receipt of the committed upload; a withdrawal it ends is forgotten."""
    withdrawal_path(cfg).unlink(missing_ok=True)
    return _write_json(cfg, receipt_path(cfg), asdict(receipt))


def load_receipt(cfg: ParticipantConfig) -> UploadReceipt | None:
    """The kept receipt of this site's upload to this federation (None: none kept).

    Raises
    ------
    InvalidInputError
        The file is not a receipt (not JSON, keys missing or of the wrong type, another
        site's or federation's): named, with what to do.
    """
    path = receipt_path(cfg)
    value = _read_json(path, "an upload receipt")
    if value is None:
        return None
    hints = get_type_hints(UploadReceipt)
    # Exact types: JSON true is not a record count.
    wrong = sorted({k for k, t in hints.items() if type(value.get(k)) is not t}
                   | (set(value) - set(hints)))
    if wrong:
        raise InvalidInputError(
            f"{path} is not an upload receipt (missing, unexpected or of the wrong type: "
            f"{', '.join(wrong)}); remove it: a rerun of the upload then asks the analyst, "
            "which names the receipt of a committed upload")
    receipt = UploadReceipt(**value)
    if (receipt.federation_id, receipt.participant) != (cfg.federation_id, cfg.id):
        raise InvalidInputError(f"{path} is the receipt of {receipt.participant!r} in "
                                f"federation {receipt.federation_id!r}, not of {cfg.id!r} in "
                                f"{cfg.federation_id!r}")
    try:
        receipt.received()
    except ValueError:
        raise InvalidInputError(f"{path}: received_at {receipt.received_at!r} is not an ISO "
                                "8601 time") from None
    return receipt


def keep_withdrawal(cfg: ParticipantConfig, reason: str) -> Path:
    """Keep this site's withdrawal (what the analyst was told, and when)."""
    return _write_json(cfg, withdrawal_path(cfg), {"reason": reason, "at": now_iso()})


def load_withdrawal(cfg: ParticipantConfig) -> dict[str, str] | None:
    """This site's own standing withdrawal ``{"reason", "at"}`` (None: it has not withdrawn,
    or an upload committed since)."""
    path = withdrawal_path(cfg)
    value = _read_json(path, "a withdrawal")
    if value is not None and not all(isinstance(value.get(k), str) for k in ("reason", "at")):
        raise InvalidInputError(f"{path} is not a withdrawal (keys {sorted(value)}, expected "
                                "'reason' and 'at')")
    return value


def keep_last_status(cfg: ParticipantConfig, status: dict[str, Any]) -> Path:
    """Keep the analyst's status answer as this site was shown it, with when it came."""
    return _write_json(cfg, last_status_path(cfg), {"as_of": now_iso(), "status": status})


def load_last_status(cfg: ParticipantConfig) -> tuple[str, dict[str, Any]] | None:
    """The analyst's last status answer and when it came (None: it never answered one)."""
    path = last_status_path(cfg)
    value = _read_json(path, "a status answer")
    if value is None:
        return None
    if not isinstance(value.get("as_of"), str) or not isinstance(value.get("status"), dict):
        raise InvalidInputError(f"{path} is not a kept status answer (keys {sorted(value)}, "
                                "expected 'as_of' and 'status')")
    return value["as_of"], value["status"]


def file_age(path: Path) -> dict[str, Any]:
    """Whether ``path`` is kept, when it was last written (ISO 8601, UTC) and how many seconds
    ago: the site model's age in ``participant status``."""
    try:
        written = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    except FileNotFoundError:
        return {"path": str(path), "kept": False, "written_at": None, "age_seconds": None}
    age = (dt.datetime.now(dt.UTC) - written).total_seconds()
    return {"path": str(path), "kept": True,
            "written_at": written.isoformat(timespec="seconds"), "age_seconds": round(age, 1)}
