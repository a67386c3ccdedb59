"""The analyst's state machine, free of any transport: one-shot uploads, relay objects,
withdrawal, alignment, and every refusal as a typed error (:mod:`common.errors`).

It takes plain values (a caller id the transport authenticated, a :class:`BundleStream`, the
dataclasses of :mod:`common.protocol_messages`) and returns plain values; it never imports gRPC
or generated code: what it keeps is encoded by the store's codec (:class:`Store`).

States: ``collecting`` (waiting for uploads) -> ``aligning`` (every expected participant has
committed; the uploads are screened first, :mod:`analyst.screening`) -> ``done`` (result
written) or ``failed``; under the ``refuse`` screening policy a named site's upload is
discarded and the state is ``collecting`` again until it uploads anew. Everything lives in
the :class:`Store`, so a restarted analyst resumes where it stopped: committed uploads are
kept, never asked for again, and the alignment runs (again) if it had not finished.

References: SPEC.md sections 1-2; issue 3, items 2 and 4; issue 32, item 2.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.core.refusal_log import RefusalLog
from noisyanchor.analyst.core.store import (
    FEDERATION_FILE,
    Store,
    npy_bytes,
    read_bundle,
    read_bundle_spec,
    receive_bundle,
    verify_bundle,
)
from noisyanchor.analyst.live_deadline import effective_deadline
from noisyanchor.analyst.screening import Decision, decide, screen_uploads
from noisyanchor.analyst.site_models import downstream_result
from noisyanchor.common.alignment import align
from noisyanchor.common.bundles import BundleSpec, BundleStream, drain, receipt
from noisyanchor.common.errors import (
    AlreadyExistsError,
    FederationFailedError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from noisyanchor.common.files import atomic_write, fsync_dir, sweep_stale_writes
from noisyanchor.common.models import load_site_model
from noisyanchor.common.protocol_messages import (
    Commitment,
    FederationInfo,
    SealedShare,
    SignedKey,
    Withdrawal,
)
from noisyanchor.common.sealing import share_statement, verify_exchange_key, verify_statement
from noisyanchor.common.signed_statements import (
    bundle_statement,
    check_signed,
    commitment_statement,
    site_model_statement,
)
from noisyanchor.common.splits import SPLIT_NAMES
from noisyanchor.common.text import MAX_PEER_TEXT, peer_text
from noisyanchor.common.theory import phase_transition_v
from noisyanchor.common.visibility import visible_json

log = logging.getLogger(__name__)

#: Folder of the store holding withdrawals (``<participant>.txt``: the reason given).
WITHDRAWN_DIR = "withdrawn"

#: File of the store naming why the last alignment failed (removed when it runs again).
FAILED_FILE = "failed.json"

#: File of the store holding the last screening's decision (``result.json``'s ``screening``).
SCREENING_FILE = "screening.json"


#: Seconds a second stream of the same participant waits for the first one to finish.
LOCK_WAIT = 30.0

#: dtype of each array of an upload (``anchor`` only for AA-I-GDP variants).
UPLOAD_DTYPES = {"data": "<f8", "anchor": "<f8", "labels": "<i8", "tags": "|i1"}

#: dtype of each array of a disclosure (the noise arrays are optional).
DISCLOSURE_DTYPES = {"data": "<f8", "rotation": "<f8", "translation": "<f8", "anchor": "<f8",
                     "data_noise": "<f8", "anchor_noise": "<f8"}


@dataclass(frozen=True)
class Committed:
    """Answer to an upload or disclosure: the receipt, and whether it was a retry."""

    receipt: bytes
    already_committed: bool


class Federation:
    """One federation as the analyst sees it (thread-safe)."""

    def __init__(self, config: AnalystConfig, store: Store) -> None:
        self.config = config
        self.method = config.method_enum
        self._lock = threading.Lock()
        self._participant_locks = {pid: threading.Lock() for pid in config.participants}
        self._error = ""
        self._align_thread: threading.Thread | None = None
        self._closed = False
        deadline = effective_deadline(config.deadline, store.root)
        public = {"federation_id": config.federation_id, "participants": list(config.participants),
                  "method": config.method, "anchors": config.anchors, "dim": config.dim,
                  "sigma": config.sigma, "v": config.v, "reference": config.reference,
                  "dealer": config.dealer, "accept_collusion": config.accept_collusion,
                  "projection_seed": config.projection_seed,
                  "translation_scale": config.translation_scale,
                  "deadline": deadline.isoformat() if deadline else None,
                  "schema": None if config.schema is None else {
                      "features": config.schema.features, "dtype": config.schema.dtype,
                      "feature_names": list(config.schema.feature_names)} | (
                      {} if config.schema.tabular is None else {
                          "typed": config.schema.tabular.canonical(),
                          "preprocessing_sha256": config.schema.preprocessing_sha256.hex()})}
        # The store is taken first (one analyst per store), then checked to be this
        # federation's under this protocol, then verified (every array against its digest).
        self.store = store.open(public)
        # The ledger may live outside the store: its own interrupted writes are swept too.
        sweep_stale_writes(config.ledger_path)
        self.store.verify()
        self._state = "done" if store.result.is_dir() else "collecting"
        atomic_write(self.store.root / FEDERATION_FILE, json.dumps(public, indent=2).encode())
        self._withdrawn_dir = self.store.root / WITHDRAWN_DIR
        self._withdrawals_logged = RefusalLog()  # per participant and window, as refusals
        self._withdrawn_dir.mkdir(exist_ok=True, mode=0o700)

    @functools.cached_property
    def ca_pems(self) -> tuple[bytes, ...]:
        """The federation CA certificates (PEM) every participant certificate is issued by."""
        return (self.config.tls.ca.read_bytes(),)

    # -- checks --------------------------------------------------------------------------------
    def check_member(self, pid: str) -> None:
        """Refuse callers that are not expected participants."""
        if pid not in self._participant_locks:
            raise PermissionDeniedError(f"{pid!r} is not a participant of federation "
                                        f"{self.config.federation_id!r}")

    def check_caller(self, pid: str, federation_id: str) -> None:
        """Refuse callers that are not expected participants or address another federation."""
        self.check_member(pid)
        if federation_id != self.config.federation_id:
            raise PermissionDeniedError(f"this analyst serves federation "
                                        f"{self.config.federation_id!r}, not {federation_id!r}")

    @property
    def deadline(self) -> datetime.datetime | None:
        """The deadline in force, read again at every use: one the operator extended while
        this analyst runs applies at once (:mod:`analyst.live_deadline`)."""
        return effective_deadline(self.config.deadline, self.store.root)

    def _deadline_unix(self) -> float:
        deadline = self.deadline
        return deadline.timestamp() if deadline else 0.0

    def check_deadline(self) -> None:
        """Refuse new work once the federation's deadline has passed."""
        deadline = self.deadline
        if deadline is not None and time.time() > deadline.timestamp():
            raise FederationFailedError(
                f"federation {self.config.federation_id!r} closed at its deadline "
                f"{deadline.isoformat()}; the analyst's operator can move it later (noisyanchor "
                "analyst deadline --config analyst.toml --extend 'in 3 days'; the running "
                "analyst applies it at once), then run this command again")

    def describe(self) -> FederationInfo:
        """The declaration participants check themselves against before the agreement."""
        cfg = self.config
        return FederationInfo(
            federation_id=cfg.federation_id, participants=tuple(cfg.participants),
            method=cfg.method, reference=cfg.reference, deadline_unix=self._deadline_unix(),
            anchors=cfg.anchors, dim=cfg.dim, sigma=cfg.sigma, v=cfg.v, dealer=cfg.dealer,
            projection_seed=cfg.projection_seed, translation_scale=cfg.translation_scale,
            model=cfg.model, schema=cfg.schema,
            report_projection_cost=bool(cfg.report_projection_cost))

    def withdraw(self, pid: str, reason: str) -> None:
        """Record that ``pid`` cannot take part (the others stop waiting for it); cleared when
        it takes part again (:meth:`rejoin`)."""
        if pid in self.store.committed(self.store.uploads):
            raise PreconditionError(f"{pid!r} already committed its upload; it cannot withdraw")
        text = peer_text(reason, MAX_PEER_TEXT, empty="no reason given")  # before stored/logged
        atomic_write(self._withdrawn_dir / f"{pid}.txt", text.encode())
        # A site repeating its withdrawal (each reason new) must not fill the log: a few lines
        # per window; the standing reason is the file's.
        number, unlogged = self._withdrawals_logged.admit((pid,))
        if unlogged:
            log.warning("%s withdrew %d more times (not logged, limit %d per %g s)", pid,
                        unlogged, self._withdrawals_logged.limit, self._withdrawals_logged.window)
        if number <= self._withdrawals_logged.limit:
            log.warning("%s withdrew: %s", pid, text)

    def withdrawals(self) -> dict[str, str]:
        """``{participant: reason}`` of every standing withdrawal (cleaned again as read: a
        file written by an earlier version, or by hand, is relayed by the same rule)."""
        return {pid: peer_text(self.store.read(path, 4 * MAX_PEER_TEXT).decode(errors="replace"),
                               MAX_PEER_TEXT)
                for pid in self.config.participants
                if (path := self._withdrawn_dir / f"{pid}.txt").is_file()}

    def rejoin(self, pid: str) -> None:
        """Clear ``pid``'s standing withdrawal: it takes part again (it asked so, once its
        records were read, or it published a key or an upload)."""
        path = self._withdrawn_dir / f"{pid}.txt"
        if path.is_file():
            path.unlink()
            log.info("%s is back (its withdrawal is cleared)", pid)

    def _receipt(self, spec: BundleSpec, pid: str) -> bytes:
        """The receipt of ``pid``'s bundle ``spec`` (:func:`common.bundles.receipt`, over the
        header as the store's codec encodes it)."""
        return receipt(spec, pid, self.store.codec.header_bytes)

    def _upload(self, pid: str) -> tuple[BundleSpec, dict[str, np.ndarray]]:
        """``pid``'s committed upload, verified, its arrays mapped from the store."""
        return read_bundle(self.store.upload_path(pid), root=self.store.root,
                           codec=self.store.codec, copy=False)

    def _width(self, spec: BundleSpec) -> int:
        """Working width ``d`` the upload must have: the config's ``dim``, else the schema's
        feature count, else the committed uploads'."""
        if self.config.dim is not None:
            return self.config.dim
        if self.config.schema is not None:
            return self.config.schema.features
        for pid in self.store.committed(self.store.uploads):
            spec = read_bundle_spec(self.store.upload_path(pid), root=self.store.root,
                                    codec=self.store.codec)[0]
            return spec.array("data").shape[1]
        data = spec.array("data")
        return data.shape[1] if data is not None and len(data.shape) == 2 else 0

    def _check_shapes(self, spec: BundleSpec, dtypes: dict[str, str], required: set[str]) -> int:
        names = {a.name for a in spec.arrays}
        if not required <= names or not names <= set(dtypes):
            raise InvalidInputError(f"a {self.method.value} bundle carries arrays "
                                    f"{sorted(required)} (optional: "
                                    f"{sorted(set(dtypes) - required)}), got {sorted(names)}")
        for a in spec.arrays:
            if a.dtype != dtypes[a.name]:
                raise InvalidInputError(f"array {a.name!r} must have dtype {dtypes[a.name]}, "
                                        f"got {a.dtype}")
        if spec.method != self.method.value:
            raise InvalidInputError(f"federation {self.config.federation_id!r} uses method "
                                    f"{self.method.value}, the bundle says {spec.method!r}")
        if spec.nbytes > self.config.max_upload_bytes:
            raise InvalidInputError(f"the bundle declares {spec.nbytes} bytes, more than the "
                                    f"limit of {self.config.max_upload_bytes}")
        d = self._width(spec)
        data = spec.array("data")
        if len(data.shape) != 2 or data.shape[0] < 1 or data.shape[1] != d:
            source = ("[federation] dim" if self.config.dim is not None else "[schema] features"
                      if self.config.schema is not None else "the uploads already committed")
            raise InvalidInputError(f"array 'data' must have shape (n, {d}) with n >= 1 "
                                    f"({source} of federation {self.config.federation_id!r}), "
                                    f"got {data.shape}")
        anchor = spec.array("anchor")
        r = self.config.anchors or 4 * d
        if anchor is not None and anchor.shape != (r, d):
            raise InvalidInputError(f"array 'anchor' must have shape ({r}, {d}), got "
                                    f"{anchor.shape}")
        return d

    def check_preprocessing(self, spec: BundleSpec) -> None:
        """Refuse a bundle whose declared preprocessing differs from the federation's (its
        digest, :mod:`common.tabular.schema`): a site that encoded its table differently
        would spoil the collaboration matrix unnoticed. Without typed columns no digest is
        declared, and a bundle naming one is refused as well."""
        declared = self.config.schema.preprocessing_sha256 if self.config.schema else b""
        if spec.preprocessing_sha256 != declared:
            shown = _short_digest
            raise InvalidInputError(
                f"the bundle's records were preprocessed differently from federation "
                f"{self.config.federation_id!r}'s [schema] (preprocessing digest "
                f"{shown(spec.preprocessing_sha256)}, the federation's {shown(declared)}): "
                "encode the table with the schema the analyst serves "
                "(a stale startup kit or another noisyanchor version?); nothing was stored")

    def check_upload_header(self, spec: BundleSpec) -> None:
        """Header checks of an upload: arrays, dtypes, shapes, method, size, preprocessing."""
        self.check_preprocessing(spec)
        required = {"data", "labels", "tags"} | ({"anchor"} if self.method.uses_anchor else set())
        self._check_shapes(spec, {k: UPLOAD_DTYPES[k] for k in required}, required)
        n = spec.array("data").shape[0]
        for name in ("labels", "tags"):
            if spec.array(name).shape != (n,):
                raise InvalidInputError(f"array {name!r} must have shape ({n},), got "
                                        f"{spec.array(name).shape}")

    def check_disclosure_header(self, spec: BundleSpec) -> None:
        """Header checks of a disclosure: ``X_c``, ``O_c``, ``Psi_c`` (and ``A``)."""
        required = {"data", "rotation", "translation"} | (
            {"anchor"} if self.method.uses_anchor else set())
        dtypes = {k: v for k, v in DISCLOSURE_DTYPES.items()
                  if k in required or k.endswith("_noise")}
        self.check_preprocessing(spec)
        d = self._check_shapes(spec, dtypes, required)
        expected = {"rotation": (d, d), "translation": (d,)}
        for name, shape in expected.items():
            if spec.array(name).shape != shape:
                raise InvalidInputError(f"array {name!r} must have shape {shape}, got "
                                        f"{spec.array(name).shape}")

    @staticmethod
    def _check_tags(arrays: dict[str, np.ndarray]) -> None:
        tags = arrays["tags"]
        if tags.size and not np.isin(tags, list(SPLIT_NAMES)).all():
            raise InvalidInputError(f"array 'tags' must hold only {sorted(SPLIT_NAMES)} "
                                    f"({', '.join(SPLIT_NAMES.values())})")

    # -- one-shot bundles ----------------------------------------------------------------------
    def _check_bundle_signature(self, pid: str, kind: str, spec: BundleSpec, signature: bytes,
                                cert_pem: bytes | None) -> None:
        """Refuse ``pid``'s ``kind`` bundle ``spec`` (with every digest) unless ``signature``
        is its kit key's over its receipt (:func:`common.signed_statements.bundle_statement`);
        ``cert_pem`` None: the caller vouches for ``pid`` (in-process use, no transport)."""
        if cert_pem is not None:
            check_signed(cert_pem, self.ca_pems[0], pid, bundle_statement(
                self.config.federation_id, pid, kind, self._receipt(spec, pid)), signature,
                f"the {kind}")

    def _commit(self, pid: str, stream: BundleStream, kind: str,
                cert_pem: bytes | None) -> Committed:
        path = (self.store.upload_path(pid) if kind == "upload"
                else self.store.disclosure_path(pid))
        lock = self._participant_locks[pid]
        if not lock.acquire(timeout=LOCK_WAIT):
            raise PreconditionError(f"another {kind} stream of {pid!r} is still in progress")
        try:
            if path.exists():
                return self._repeated(pid, path, stream, kind, cert_pem)
            if kind == "upload" and self._state != "collecting":
                raise PreconditionError(f"federation is {self._state}; uploads are closed")
            # The signature is read when the stream is: in its header or its trailer.
            spec = receive_bundle(path, stream, self._check_tags if kind == "upload" else None,
                                  codec=self.store.codec,
                                  verify=lambda final: self._check_bundle_signature(
                                      pid, kind, final, stream.signature, cert_pem))
        finally:
            lock.release()
        missing = self.missing_uploads()
        log.info("committed %s of %s (%d bytes)%s", kind, pid, spec.nbytes,
                 "" if kind != "upload" else f"; waiting for {', '.join(missing)}" if missing
                 else "; every upload is in")
        return Committed(self._receipt(spec, pid), False)

    def _repeated(self, pid: str, path: Path, stream: BundleStream, kind: str,
                  cert_pem: bytes | None) -> Committed:
        """A stream of an already committed bundle: its receipt again when identical, else
        refused. A header with digests is answered at once; one whose digests follow in the
        trailer is read to its end (hashed, nothing stored) unless its arrays differ already."""
        # The receipt is answered from verified bytes only.
        committed = verify_bundle(path, root=self.store.root, codec=self.store.codec)
        spec = stream.spec
        if spec.without_digests() == committed.without_digests() and not spec.has_digests:
            spec = drain(stream)
        if spec.has_digests and self._receipt(spec, pid) == self._receipt(committed, pid):
            self._check_bundle_signature(pid, kind, spec, stream.signature, cert_pem)
            return Committed(self._receipt(committed, pid), True)
        when = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
        done = "uploaded" if kind == "upload" else f"made its {kind}"
        raise AlreadyExistsError(
            f"{pid!r} already {done} at {when.isoformat(timespec='seconds')}, receipt "
            f"{self._receipt(committed, pid).hex()[:16]}...; each participant uploads exactly "
            f"once and this {kind} differs, so it was refused and nothing was stored")

    def upload(self, pid: str, stream: BundleStream, cert_pem: bytes | None = None) -> Committed:
        """Participant ``pid``'s one upload, signed by its kit key (the certificate
        ``cert_pem`` the CA issued naming ``pid``; None: an in-process caller vouches for
        ``pid``); starts the alignment once everyone has committed."""
        self.check_caller(pid, stream.spec.federation_id)
        self.check_deadline()
        self.check_upload_header(stream.spec)
        done = self._commit(pid, stream, "upload", cert_pem)
        self.rejoin(pid)
        self.maybe_align()
        return done

    def disclose(self, pid: str, stream: BundleStream,
                 cert_pem: bytes | None = None) -> Committed:
        """A colluder's disclosure, signed as an upload is, accepted only when the federation
        allows collusion."""
        self.check_caller(pid, stream.spec.federation_id)
        if not self.config.accept_collusion:
            raise PermissionDeniedError(f"federation {self.config.federation_id!r} does not "
                                        "accept collusion disclosures (accept_collusion = false)")
        self.check_disclosure_header(stream.spec)
        return self._commit(pid, stream, "disclosure", cert_pem)

    # -- relay ---------------------------------------------------------------------------------
    def _publish_once(self, path: Path, data: bytes, refusal: str,
                      same: Callable[[bytes], bool] | None = None, *, event: str) -> None:
        """Write ``data`` at ``path`` unless something is there already. Publishing again is a
        no-op (the first copy is kept) when ``same(stored bytes)`` holds (default: identical
        bytes), else refused with ``refusal``: a restarted participant may repeat itself."""
        with self._lock:
            if path.exists():
                stored = self.store.read(path)
                if not (same(stored) if same is not None else stored == data):
                    raise AlreadyExistsError(refusal)
                return
            atomic_write(path, data)
        log.info("relay: %s", event)

    def _stored_key(self, pid: str) -> SignedKey | None:
        path = self.store.keys / f"{pid}.pb"
        return self.store.codec.key_of(self.store.read(path)) if path.exists() else None

    def publish_key(self, pid: str, public_key: bytes, signature: bytes, bound_to: bytes,
                    cert_pem: bytes) -> None:
        """Store ``pid``'s signed X25519 key with the certificate seen on its connection.

        The dealer's key is bound to nothing; every other key must be bound to the dealer's
        published key (:func:`common.sealing.key_statement`), so the dealer publishes first.
        """
        stored = self._stored_key(pid)
        if stored is None or stored.public_key != public_key:  # a repeat of the same is a no-op
            self.check_not_uploaded(pid)
        dealer = self.config.dealer
        if pid == dealer:
            if bound_to:
                raise InvalidInputError(f"the dealer {dealer!r} binds its exchange key to "
                                        "nothing; bound_to must be empty")
        else:
            dealer_key = self._stored_key(dealer)
            if dealer_key is None:
                raise PreconditionError(f"the dealer {dealer!r} has not published its exchange "
                                        "key yet; every other key is bound to it")
            if bound_to != dealer_key.public_key:
                raise UnauthenticatedError(f"the exchange key of {pid!r} is bound to another "
                                           f"key than the dealer {dealer!r}'s of this agreement "
                                           "(a stale or replayed statement)")
        # The participants verify every key themselves (the analyst is not trusted); checking
        # here too refuses a bad signature at once instead of relaying it.
        self.check_deadline()
        verify_exchange_key(cert_pem, self.ca_pems[0], self.config.federation_id,
                            pid, public_key, signature, bound_to=bound_to)
        self.rejoin(pid)
        key = SignedKey(pid, public_key, signature, cert_pem, bound_to)
        codec = self.store.codec
        # Signatures may be randomized, so the public key decides whether it is the same.
        self._publish_once(self.store.keys / f"{pid}.pb", codec.key_bytes(key),
                           f"the exchange key of {pid!r} was already published differently",
                           lambda stored: codec.key_of(stored).public_key == public_key,
                           event=f"{pid} published its exchange key")

    def check_not_uploaded(self, pid: str) -> None:
        """Refuse a new anchor agreement of a participant whose upload is committed (a site run
        again after its upload makes a new exchange key): say so, with when and the receipt,
        instead of letting the relay call the new key a different one."""
        path = self.store.upload_path(pid)
        if not path.is_file():
            return
        spec = read_bundle_spec(path, root=self.store.root, codec=self.store.codec)[0]
        when = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
        raise AlreadyExistsError(
            f"{pid!r} already uploaded at {when.isoformat(timespec='seconds')}, receipt "
            f"{self._receipt(spec, pid).hex()[:16]}...; each site uploads once, so there is "
            "nothing to do ('noisyanchor participant status' shows the federation's progress)")

    def list_keys(self) -> list[SignedKey]:
        """Every published signed key."""
        return [k for pid in self.config.participants if (k := self._stored_key(pid)) is not None]

    def post_sealed(self, pid: str, shares: Sequence[SealedShare], cert_pem: bytes) -> None:
        """Relay the dealer's sealed shares (ciphertext only) to their recipients, the dealer
        itself included (its copy lets a restarted dealer reopen its seed).

        Only the dealer named in the config may post, each share signed with the TLS key of
        the certificate on its connection over both exchange keys of this agreement
        (:func:`common.sealing.share_statement`); the recipients check that signature again.
        Every share is checked before any is stored. A share for a recipient that already has
        one is a no-op (the first is kept: a restarted dealer re-seals with fresh nonces).
        """
        dealer = self.config.dealer
        if pid != dealer:
            raise PermissionDeniedError(f"only the dealer {dealer!r} named in the analyst config "
                                        f"may post sealed shares, not {pid!r}")
        fid, ca_pem = self.config.federation_id, self.ca_pems[0]
        dealer_key = self._stored_key(dealer)
        if dealer_key is None:
            raise PreconditionError(f"the dealer {dealer!r} has not published its exchange key")
        for share in shares:
            if share.recipient_id not in self._participant_locks:
                raise InvalidInputError(f"sealed share for {share.recipient_id!r}: not a "
                                        "participant of this federation")
            recipient_key = self._stored_key(share.recipient_id)
            if recipient_key is None:
                raise PreconditionError(f"sealed share for {share.recipient_id!r}, who has not "
                                        "published an exchange key")
            verify_statement(cert_pem, ca_pem, dealer, share_statement(
                fid, dealer, share.recipient_id, dealer_key.public_key, recipient_key.public_key,
                share.nonce, share.ciphertext), share.signature,
                f"the sealed share from {dealer!r} to {share.recipient_id!r}")
        for share in shares:
            stored = SealedShare(dealer, share.recipient_id, share.nonce, share.ciphertext,
                                 share.signature)
            self._publish_once(
                self.store.sealed / f"{share.recipient_id}.pb",
                self.store.codec.share_bytes(stored),
                f"the sealed share for {share.recipient_id!r} was already posted by another "
                "participant",
                lambda old: self.store.codec.share_of(old).dealer_id == dealer,
                event=f"dealer {dealer} sealed the anchor seed to {share.recipient_id}")

    def get_sealed(self, pid: str) -> SealedShare:
        """The sealed share addressed to ``pid``."""
        path = self.store.sealed / f"{pid}.pb"
        if not path.exists():
            raise NotFoundError(f"no sealed share for {pid!r} yet")
        return self.store.codec.share_of(self.store.read(path))

    def publish_commitment(self, pid: str, digest: bytes, signature: bytes = b"",
                           cert_pem: bytes | None = None) -> None:
        """Store ``pid``'s anchor commitment, signed by its kit key
        (:func:`common.signed_statements.commitment_statement`; ``cert_pem`` None: an
        in-process caller vouches for ``pid``)."""
        if len(digest) != 32:
            raise InvalidInputError(f"a commitment is a 32-byte SHA-256 digest, got {len(digest)}")
        if cert_pem is not None:
            check_signed(cert_pem, self.ca_pems[0], pid, commitment_statement(
                self.config.federation_id, pid, digest), signature, "the commitment")
        self._publish_once(self.store.commitments / f"{pid}.bin", digest,
                           f"the commitment of {pid!r} was already published differently",
                           event=f"{pid} committed to the anchor")

    def list_commitments(self) -> list[Commitment]:
        """Every published commitment."""
        return [Commitment(pid, self.store.read(path))
                for pid in self.config.participants
                if (path := self.store.commitments / f"{pid}.bin").exists()]

    # -- alignment -----------------------------------------------------------------------------
    def missing_uploads(self) -> list[str]:
        """Expected participants whose upload is not committed yet, in config order."""
        committed = set(self.store.committed(self.store.uploads))
        return [pid for pid in self.config.participants if pid not in committed]

    def close(self) -> None:
        """Shutting down: no alignment starts any more (one running is abandoned by the server;
        it runs again at the next start)."""
        with self._lock:
            self._closed = True

    @property
    def state(self) -> str:
        """``collecting``, ``aligning``, ``done`` or ``failed``."""
        return self._state

    def status(self, site: str) -> dict[str, Any]:
        """Progress as participant ``site`` may see it: state, expected, committed and
        disclosed ids, error, the result summary with only the federation's and ``site``'s own
        entries (:func:`common.visibility.visible_json`)."""
        return {"federation_id": self.config.federation_id, "state": self._state,
                "expected": list(self.config.participants),
                "committed": self.store.committed(self.store.uploads),
                "disclosed": self.store.committed(self.store.disclosures),
                "error": self._error,
                "result_json": visible_json(self.store.read_result("result.json").decode(),
                                            site, self.config.participants)
                if self._state == "done" else "",
                "withdrawn": [Withdrawal(p, r)
                              for p, r in self.withdrawals().items()],
                "deadline_unix": self._deadline_unix()}

    def site_model(self, pid: str, asked: str = "", signature: bytes = b"",
                   cert_pem: bytes | None = None) -> bytes:
        """The site model file of participant ``pid`` (its map ``N_i``, the model, the
        federation's held-out metrics and its own; :mod:`analyst.site_models`): the same bytes
        on every call, checked against the digest ``result.json`` recorded. The request is
        signed by ``pid``'s kit key (:func:`common.signed_statements.site_model_statement`;
        ``cert_pem`` None: an in-process caller vouches for ``pid``).

        Raises
        ------
        UnauthenticatedError
            The request is unsigned, or not signed by ``pid``'s kit key.
        PermissionDeniedError
            ``asked`` names another participant than the caller (only one's own part is served).
        PreconditionError
            The federation is not done; the message says what it is still waiting for.
        IntegrityError
            The stored file does not match its digest or is not a valid site model.
        """
        self.check_member(pid)
        if cert_pem is not None:
            check_signed(cert_pem, self.ca_pems[0], pid, site_model_statement(
                self.config.federation_id, pid, asked), signature, "the site model request")
        if asked and asked != pid:
            raise PermissionDeniedError(f"{pid!r} may fetch only its own site model, not "
                                        f"{asked!r}'s: each site receives its own map N_i")
        fid, state = self.config.federation_id, self._state
        if state == "collecting":
            missing = self.missing_uploads()
            withdrawn = self.withdrawals()
            raise PreconditionError(
                f"federation {fid!r} is not done: waiting for the upload(s) of "
                f"{', '.join(missing)} ({len(self.config.participants) - len(missing)} of "
                f"{len(self.config.participants)} committed)"
                + "".join(f"; {w} withdrew: {r}" for w, r in withdrawn.items())
                + "; the site models exist once the alignment is done")
        if state == "aligning":
            raise PreconditionError(f"federation {fid!r} is not done: every upload is in and "
                                    "the alignment is running; ask again shortly")
        if state == "failed":
            raise FederationFailedError(f"federation {fid!r} failed, so there is no site model: "
                                        f"{self._error}")
        summary = json.loads(self.store.read_result("result.json"))
        entry = (summary.get("site_models") or {}).get(pid)
        screened = summary.get("screening") or {}
        if entry is None and pid in screened.get("excluded", ()):
            reasons = "; ".join(f["reason"] for f in screened["findings"] if f["site"] == pid)
            raise FederationFailedError(
                f"{pid!r} was excluded from federation {fid!r} by the analyst's screening "
                f"before alignment, so it has no site model: {reasons}")
        if entry is None:
            raise PreconditionError(f"the result of federation {fid!r} was computed by an "
                                    "analyst that did not keep site models; it has none to send")
        path = self.store.result / entry["file"]
        raw = self.store.read_result(entry["file"])  # the manifest's SHA-256, as result.json's
        try:
            load_site_model(raw, what=str(path))
        except InvalidInputError as err:
            raise IntegrityError(f"the stored site model is refused: {err}") from None
        return raw

    def maybe_align(self) -> None:
        """Start the alignment in the background once every expected upload is committed."""
        with self._lock:
            if self._state != "collecting" or self._closed or self.missing_uploads():
                return
            self._state = "aligning"
            (self.store.root / FAILED_FILE).unlink(missing_ok=True)
            log.info("alignment started: %d uploads, method %s", len(self.config.participants),
                     self.method.value)
            self._align_thread = threading.Thread(target=self._align, name="align", daemon=True)
            self._align_thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a running alignment (tests and shutdown)."""
        if self._align_thread is not None:
            self._align_thread.join(timeout)

    def _align(self) -> None:
        try:
            decision = self.screen()
            if decision.refused:
                self._refuse(decision)
                return
            result = self.compute_result(decision)
            self.store.commit_result(result)
            self._state = "done"
            summary = json.loads(result["result.json"])
            log.info("alignment done in %.1f s (%s, certified %s); result in %s",
                     summary["seconds"], summary["solver"].get("name"),
                     summary["solver"].get("certified"), self.store.result)
        except Exception as err:  # reported through Status; the server keeps serving
            log.exception("alignment failed")
            self._error, self._state = f"{type(err).__name__}: {err}", "failed"
            atomic_write(self.store.root / FAILED_FILE,
                         json.dumps({"state": "failed", "error": self._error}).encode())

    def screen(self) -> Decision:
        """Screen every committed upload (:func:`analyst.screening.screen_uploads`) and apply
        the ``[federation] screening`` policy; each named site is logged with its reason and
        the decision kept in the store."""
        cfg = self.config
        bundles = {pid: self._upload(pid)[1] for pid in cfg.participants}
        screening = screen_uploads(
            cfg, {pid: b["data"] for pid, b in bundles.items()},
            {pid: b["anchor"] for pid, b in bundles.items()} if self.method.uses_anchor
            else None)
        decision = decide(cfg.screening, cfg.participants, screening)
        for pid in screening.flagged:
            log.warning("screening (policy %s): %s %s", cfg.screening, pid,
                        decision.site_text(pid))
        atomic_write(self.store.root / SCREENING_FILE,
                     json.dumps(decision.to_json(), indent=2).encode())
        return decision

    def _refuse(self, decision: Decision) -> None:
        """``refuse``: discard each named site's upload, record it as out with the reason and
        how to come back (every status shows it), and collect again."""
        for pid in decision.refused:
            path = self.store.upload_path(pid)
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)
            atomic_write(self._withdrawn_dir / f"{pid}.txt", peer_text(
                decision.site_text(pid), MAX_PEER_TEXT).encode())
        with self._lock:
            self._state = "collecting"
        log.warning("nothing aligned: waiting for %s to upload again",
                    ", ".join(decision.refused))

    def compute_result(self, decision: Decision) -> dict[str, bytes | Path]:
        """Align the committed uploads of the sites ``decision`` includes (GOPP or Procrustes by
        method) and encode the result: exactly what a federation of those sites alone computes
        (its reference: the configured one, else the first site included). The uploads are
        read as memory maps of the verified bundles and ``Z`` is written into its file
        (``z.npy``, moved into the result), so neither is held in memory whole."""
        cfg = self.config
        start = time.perf_counter()
        sites = decision.included
        specs, bundles = zip(*map(self._upload, sites), strict=True)
        data = [b["data"] for b in bundles]
        anchors = [b["anchor"] for b in bundles] if self.method.uses_anchor else None
        z_file = self.store.scratch_file("z.npy")
        alignment = align(self.method, data, anchors,
                          reference=sites.index(cfg.reference) if cfg.reference in sites else 0,
                          max_iter=cfg.max_iter, tol=cfg.tol, precision=cfg.precision,
                          stopping=cfg.stopping, gopp_method=cfg.gopp_method,
                          z_file=z_file)
        d = data[0].shape[1]
        r = anchors[0].shape[0] if anchors else None
        summary = {
            "federation_id": cfg.federation_id, "method": self.method.value,
            "participants": list(sites), "dim": d, "anchors": r,
            "records": int(alignment.z.shape[0]), "sigma": cfg.sigma, "v": cfg.v,
            "v_pt": phase_transition_v(len(data), d, r) if r else None,
            "preprocessing_sha256": (cfg.schema.preprocessing_sha256.hex() or None
                                     if cfg.schema is not None else None),
            "row_ranges": {pid: list(rr) for pid, rr in zip(sites, alignment.row_ranges,
                                                             strict=True)},
            "solver": alignment.solver,
            "screening": decision.to_json(),
            "seconds": time.perf_counter() - start,
        }
        if cfg.report_projection_cost:  # each site's own measurement, as it sent it
            summary["projection_costs"] = {pid: spec.projection_cost for pid, spec
                                           in zip(sites, specs, strict=True)}
        labels = np.concatenate([b["labels"] for b in bundles])
        tags = np.concatenate([b["tags"] for b in bundles])
        (summary["model"], summary["site_models"], summary["contributions"],
         model_files) = downstream_result(
            federation_id=cfg.federation_id, method=self.method,
            participants=list(sites), model_name=cfg.model, alignment=alignment,
            labels=labels, tags=tags, contributions_max_sites=cfg.contributions_max_sites,
            fit=cfg.fit)
        return {
            "z.npy": z_file,
            "labels.npy": npy_bytes(labels),
            "tags.npy": npy_bytes(tags),
            "rotations.npy": npy_bytes(alignment.rotations),
            "means.npy": npy_bytes(alignment.means),
            "shift.npy": npy_bytes(alignment.shift),
            **model_files,
            "result.json": json.dumps(summary, indent=2).encode(),
        }


def _short_digest(digest: bytes) -> str:
    """The first 16 hex digits of ``digest`` (``none`` when empty), for messages."""
    return digest.hex()[:16] + "..." if digest else "none"

