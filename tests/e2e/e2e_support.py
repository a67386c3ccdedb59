"""Helpers of the end-to-end tests: a handle on a running analyst process, well-formed uploads,
an aligned federation that serves DP releases."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from forged_certs import forge, forge_intermediate

from noisyanchor.common.gdp import haar_orthogonal, make_anchor
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import bundle_spec
from noisyanchor.deploy.certs import Pki
from noisyanchor.deploy.demo import (
    FederationFiles,
    wait_for_result,
    write_analyst,
    write_participant,
)
from noisyanchor.deploy.launch import start, stop, wait_for_port
from noisyanchor.participant.client import AnalystClient

FEDERATION = "e2e"


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` every 50 ms until it holds or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def free_port() -> int:
    """A port that was free a moment ago (for restarting an analyst on the same port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningAnalyst:
    """An analyst process and what is needed to talk to it."""

    files: FederationFiles
    method: str
    port: int
    proc: object
    log: Path
    procs: list = field(default_factory=list)

    def client(self, pid: str, *, timeout: float = 10.0, tls: TlsFiles | None = None,
               federation_id: str = FEDERATION) -> AnalystClient:
        """An mTLS client presenting ``pid``'s certificate (or ``tls``)."""
        if tls is None:
            cert, key = self.files.pki.clients[pid]
            tls = TlsFiles(self.files.pki.ca, cert, key)
        return AnalystClient(f"127.0.0.1:{self.port}", tls, "localhost", federation_id, timeout)

    def kill(self) -> None:
        """SIGKILL, no chance to clean up (a crash)."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        """Start a new analyst process on the same port and store, the running one stopped
        first (SIGTERM) if it is still running: one analyst per store (issue 22)."""
        if self.proc.poll() is None:
            stop(self.proc)
        self.files.port_file.unlink(missing_ok=True)
        self.proc = start(["analyst", "serve", "--config", self.files.analyst_config, "--port",
                           self.port], self.log)
        self.procs.append(self.proc)
        assert wait_for_port(self.files.port_file, self.proc) == self.port


def random_upload(rng: np.random.Generator, n: int, d: int, r: int | None) -> dict:
    """Arrays of a well-formed upload: random records, and an anchor of the protocol's form
    (``A O + 1 Psi^T``, so that the analyst's screening before alignment passes it)."""
    arrays = {"data": rng.standard_normal((n, d))}
    if r is not None:
        arrays["anchor"] = make_anchor(r, d, rng) @ haar_orthogonal(d, rng) \
            + rng.standard_normal(d)
    arrays |= {"labels": rng.integers(0, 3, n).astype("<i8"),
               "tags": rng.integers(0, 3, n).astype("|i1")}
    return arrays


def send(client: AnalystClient, method: str, arrays: dict, federation_id: str = FEDERATION,
         *, digests: bool = False):
    """Stream ``arrays`` as an upload, as a participant does (digests hashed while sending, in
    the trailer; ``digests=True``: hashed first, in the header); returns the receipt."""
    spec = bundle_spec(federation_id, method, arrays, digests=digests)
    return client.send_bundle("upload", spec, arrays)


def refused_upload(fed: RunningAnalyst, pid: str,
                   messages: Callable[[threading.Event], Iterator[Any]], *,
                   timeout: float) -> grpc.RpcError:
    """The error that ends one Upload stream from ``pid`` carrying ``messages(stop)`` (it must
    end the call: the test fails otherwise); ``stop`` is set once the call is over, so a
    generator that waits on it, and gRPC's sending thread with it, always ends."""
    stop = threading.Event()
    try:
        with fed.client(pid) as c, pytest.raises(grpc.RpcError) as err:
            c.stub.Upload(messages(stop), timeout=timeout)
    finally:
        stop.set()
    return err.value


def forge_certificate(pki: Pki, stem: str, *, common_names: Sequence[str] = (),
                      uris: Sequence[str] = ()) -> TlsFiles:
    """A client certificate the federation CA signs with exactly these subject common names and
    SAN URIs (:func:`forged_certs.forge`), written as ``<stem>.pem``/``.key`` beside the PKI;
    needs the CA key (``keep_ca_key``)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key, cert = forge(ca_key, ca_cert, common_names=common_names, uris=uris)
    cert_path, key_path = pki.ca.parent / f"{stem}.pem", pki.ca.parent / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return TlsFiles(pki.ca, cert_path, key_path)


def forge_chain(pki: Pki, stem: str, participant: str) -> TlsFiles:
    """A client certificate naming ``participant`` issued by a rogue intermediate CA that the
    federation CA signed (against its own path length 0), presented with the intermediate in
    its chain so TLS can build the path to the federation CA; needs ``keep_ca_key``."""
    from noisyanchor.common.identity import participant_san

    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    mid_key, mid_cert = forge_intermediate(ca_key, ca_cert)
    key, cert = forge(mid_key, mid_cert, common_names=[participant],
                      uris=[participant_san(participant).value])
    pem = serialization.Encoding.PEM
    cert_path, key_path = pki.ca.parent / f"{stem}.pem", pki.ca.parent / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(pem) + mid_cert.public_bytes(pem))
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return TlsFiles(pki.ca, cert_path, key_path)


@dataclass
class ReleaseFederation:
    """An aligned aa-igdp federation of real processes whose analyst serves DP releases."""

    analyst: RunningAnalyst
    configs: dict[str, Path]
    records: np.ndarray

    def charges(self) -> int:
        """Rows of the analyst's privacy ledger."""
        import json

        path = self.analyst.files.store / "privacy_ledger.json"
        if not path.is_file():
            return 0
        return sum(len(v) for v in json.loads(path.read_text())["datasets"].values())


def release_federation(root: Path, ids: Sequence[str], records: Sequence[np.ndarray], *,
                       dim: int, anchors: int, tables: str, timeout: float = 60.0,
                       before_upload: Callable[[dict[str, Path]], None] | None = None,
                       extra: Mapping[str, Mapping[str, Any]] | None = None
                       ) -> ReleaseFederation:
    """Start an analyst (its config extended by the TOML ``tables``, e.g. ``[privacy]``, and by
    ``extra`` keys of existing tables, as :func:`deploy.demo.write_analyst` takes them), upload
    ``records[i]`` as participant ``ids[i]`` (keeping the GDP keys for score queries) and wait
    for the alignment. ``before_upload(configs)`` runs against the not yet aligned analyst. The
    caller stops the processes with :func:`stop_federation`."""
    fed = start_release_federation(root, ids, records, dim=dim, anchors=anchors, tables=tables,
                                   timeout=timeout, extra=extra)
    try:
        if before_upload is not None:
            before_upload(fed.configs)
        for p in start_uploads(fed):
            assert p.wait(timeout) == 0
        wait_for_result(fed.analyst.files.store, fed.analyst.proc, timeout)
    except BaseException:
        stop_federation(fed)
        raise
    return fed


def start_release_federation(root: Path, ids: Sequence[str], records: Sequence[np.ndarray], *,
                             dim: int, anchors: int, tables: str, timeout: float = 60.0,
                             extra: Mapping[str, Mapping[str, Any]] | None = None
                             ) -> ReleaseFederation:
    """The first half of :func:`release_federation`: the analyst started (on a port it keeps
    across restarts) and every participant's config written; nothing uploaded yet."""
    data = {}
    for pid, x in zip(ids, records, strict=True):
        data[pid] = root / "data" / f"{pid}.npz"
        data[pid].parent.mkdir(parents=True, exist_ok=True)
        np.savez(data[pid], x=x, labels=np.arange(len(x)) % 2, tags=np.zeros(len(x), dtype="i1"))
    files = write_analyst(root, tuple(ids), federation_id=FEDERATION, method="aa-igdp",
                          anchors=anchors, dim=dim, sigma=0.0, v=0.0, accept_collusion=False,
                          data=data, extra=extra)
    with open(files.analyst_config, "a") as fh:
        fh.write(tables)
    port = free_port()
    log = root / "analyst.log"
    proc = start(["analyst", "serve", "--config", files.analyst_config, "--port", port], log)
    fed = ReleaseFederation(RunningAnalyst(files, "aa-igdp", port, proc, log, [proc]), {},
                            np.vstack(records))
    try:
        assert wait_for_port(files.port_file, proc) == port
        fed.configs = {pid: write_participant(
            files, pid, federation_id=FEDERATION, address=f"127.0.0.1:{port}", method="aa-igdp",
            anchors=anchors, dim=None, projection_seed=None, sigma=0.0, v=0.0, seed=11 + k,
            keep_secrets=True, timeout=timeout) for k, pid in enumerate(ids)}
    except BaseException:
        stop_federation(fed)
        raise
    return fed


def start_uploads(fed: ReleaseFederation) -> list:
    """``participant upload`` processes (anchor agreement, then the upload), one per
    participant, logging to ``<pid>.log`` beside the federation; stopped with the federation."""
    root = fed.analyst.files.root
    uploads = [start(["participant", "upload", "--config", cfg], root / f"{pid}.log")
               for pid, cfg in fed.configs.items()]
    fed.analyst.procs.extend(uploads)
    return uploads


def stop_federation(fed: ReleaseFederation) -> None:
    """Stop every process of ``fed`` (analysts, restarts included, and uploads)."""
    for p in fed.analyst.procs:
        stop(p)
