"""``noisyanchor provision --project F --expiry``: when each certificate of a federation's kits
expires, and what to do before then.

Read from the operator's kits folder: the kept CA (``ca/ca.pem``) and, in every kit, its own
certificate and its copy of the CA certificate (the trust anchor the kit's holder checks the
others against). Each row says what needs doing: renew a certificate that is expired or expires
before the federation's deadline (or within :data:`SOON`), re-ship a kit whose CA copy is not
the kept CA certificate, and, after ``--renew ca``, until when kits shipped before the renewal
still trust the previous CA certificate.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes

from noisyanchor.common.durations import human_duration
from noisyanchor.common.errors import NotFoundError
from noisyanchor.common.tomlconfig import read_toml

#: A certificate is flagged once this span, or a quarter of its validity if less, is left.
SOON = dt.timedelta(days=30)


@dataclass(frozen=True)
class Expiry:
    """One certificate of the kits folder.

    Attributes
    ----------
    kit : str
        ``ca`` (the kept CA) or a kit's name.
    file : str
        Path relative to the kits folder.
    role : str
        ``"CA"`` (the kept CA), ``"own"`` (the kit's certificate) or ``"CA copy"``.
    not_after : datetime
        End of validity (UTC).
    notes : tuple of str
        What needs doing, empty when nothing does.
    """

    kit: str
    file: str
    role: str
    not_after: dt.datetime
    notes: tuple[str, ...]

    def as_dict(self, now: dt.datetime) -> dict:
        return {"kit": self.kit, "file": self.file, "role": self.role,
                "not_after": self.not_after.isoformat(),
                "seconds_left": round((self.not_after - now).total_seconds()),
                "notes": list(self.notes)}


def _utc(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _fingerprint(cert: x509.Certificate) -> bytes:
    return cert.fingerprint(hashes.SHA256())


def _deadline(out: Path) -> dt.datetime | None:
    config = out / "analyst" / "analyst.toml"
    if not config.is_file():
        return None
    value = read_toml(config).get("federation", {}).get("deadline")
    return value if isinstance(value, dt.datetime) else None


def _term_notes(cert: x509.Certificate, renew: str, now: dt.datetime,
                deadline: dt.datetime | None) -> list[str]:
    """What the validity of ``cert`` asks for (``renew``: the ``--renew`` argument)."""
    end = cert.not_valid_after_utc
    fix = f"noisyanchor provision --renew {renew}"
    if end <= now:
        return [f"EXPIRED {human_duration((now - end).total_seconds())} ago: {fix}"]
    if cert.not_valid_before_utc > now:
        return [f"not valid before {_utc(cert.not_valid_before_utc)}: check this host's "
                "clock (NTP)"]
    if deadline is not None and end < deadline:
        return [f"expires before the federation's deadline {_utc(deadline)}: {fix}"]
    soon = min(SOON, (end - cert.not_valid_before_utc) / 4)
    if end - now < soon:
        return [f"expires within {human_duration(soon.total_seconds())}: {fix}"]
    return []


def _previous_ca(out: Path) -> dict | None:
    """The record of the last CA renewal in ``ca/issued.json``, if any."""
    path = out / "ca" / "issued.json"
    issued = json.loads(path.read_text()) if path.is_file() else []
    renewals = [r for r in issued if r.get("name") == "ca" and "previous_not_after" in r]
    return renewals[-1] if renewals else None


def expiry_report(out: Path, now: dt.datetime | None = None) -> list[Expiry]:
    """Every certificate of the kits under ``out``: the kept CA first, then each kit's own
    certificate and CA copy."""
    out = Path(out)
    now = now or dt.datetime.now(dt.UTC)
    if not (out / "ca" / "ca.pem").is_file():
        raise NotFoundError(f"no CA under {out / 'ca'}: is {out} the kits folder of a "
                            "provisioned federation (--out)?")
    ca = _load(out / "ca" / "ca.pem")
    deadline = _deadline(out)
    notes = _term_notes(ca, "ca", now, deadline)
    renewal = _previous_ca(out)
    if renewal is not None:
        before = dt.datetime.fromisoformat(renewal["previous_not_after"])
        renewed = dt.datetime.fromisoformat(renewal["renewed"])
        if before > now:
            notes.append(f"renewed {renewal['renewed'][:10]}: kits shipped before then trust "
                         f"the previous CA certificate until {_utc(before)} (in "
                         f"{human_duration((before - now).total_seconds())}); re-ship their "
                         "pki/ca.pem by then")
        elif renewed >= before:
            notes.append(f"renewed {renewal['renewed'][:10]}, after the previous CA "
                         f"certificate expired ({_utc(before)}): a kit shipped before cannot "
                         "connect until it has the new pki/ca.pem")
    rows = [Expiry("ca", "ca/ca.pem", "CA", ca.not_valid_after_utc, tuple(notes))]
    for kit in sorted(p for p in out.iterdir() if p.is_dir() and p.name != "ca"):
        own = kit / "pki" / f"{kit.name}.pem"
        copy = kit / "pki" / "ca.pem"
        if not own.is_file() or not copy.is_file():
            continue  # not a kit (a folder of the operator's own)
        cert = _load(own)
        notes = _term_notes(cert, kit.name, now, deadline)
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            notes.insert(0, "NOT issued by this CA: make the kit again (--renew "
                         f"{kit.name} after --add-site, or a new federation)")
        rows.append(Expiry(kit.name, str(own.relative_to(out)), "own", cert.not_valid_after_utc,
                           tuple(notes)))
        kept = _load(copy)
        notes = [] if _fingerprint(kept) == _fingerprint(ca) else [
            "not the kept CA certificate: put ca/ca.pem in its place and re-ship it"]
        rows.append(Expiry(kit.name, str(copy.relative_to(out)), "CA copy",
                           kept.not_valid_after_utc, tuple(notes)))
    return rows


def expiry_table(rows: list[Expiry], now: dt.datetime | None = None) -> str:
    """The report as aligned text: kit, file, expiry (UTC), time left, what to do."""
    now = now or dt.datetime.now(dt.UTC)
    cells = [("kit", "certificate", "expires (UTC)", "left", "to do")]
    for row in rows:
        left = (row.not_after - now).total_seconds()
        cells.append((row.kit, row.file, row.not_after.strftime("%Y-%m-%d %H:%M"),
                      human_duration(left) if left > 0 else "expired",
                      "; ".join(row.notes) or "-"))
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4]
                     for c in cells)
