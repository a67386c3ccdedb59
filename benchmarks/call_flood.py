"""Attackers of the analyst that make well-formed gRPC calls carrying megabytes of text (issue 30,
item 2): refusals whose requests name huge or foreign ids, and withdrawals with huge reasons.

Shared by ``benchmarks/bench_flood.py`` (the issue's size) and the e2e tests (small). Unlike
:mod:`benchmarks.stream_flood`, these speak gRPC as a site's own client does (mutual TLS, one
channel per connection, ``threads`` calls in flight at once), so the cost lands where a real
client's would: in the analyst's parsing, checks, handlers and log.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

#: Kinds of flood :func:`text_flood` makes.
KINDS = ("refusals", "withdrawals")


@dataclass
class CallFloodReport:
    """What one call flood sent and how the analyst answered (status code names)."""

    calls: int = 0
    bytes_sent: int = 0
    seconds: float = 0.0
    codes: Counter = field(default_factory=Counter)

    def to_json(self) -> dict:
        """The counts, for a result file."""
        return {"calls": self.calls, "bytes_sent": self.bytes_sent, "seconds": self.seconds,
                "codes": dict(self.codes)}


def channel(address: str, tls: tuple[Path, Path, Path], server_name: str = "localhost"
            ) -> grpc.Channel:
    """A mutual-TLS channel with a connection of its own (no subchannel shared with another
    channel of this process)."""
    ca, cert, key = tls
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(),
                                               cert.read_bytes())
    return grpc.secure_channel(address, credentials,
                               options=[("grpc.ssl_target_name_override", server_name),
                                        ("grpc.use_local_subchannel_pool", 1)])


def _refusal(stub, federation_id: str, k: int, filler: str) -> Callable[[], object]:
    """The ``k``-th call of a refusal flood (each refused for a different reason and with a
    different text): a huge malformed site id, a huge malformed federation id, another site's
    model, another federation (short ids, distinct each time), a huge withdrawal reason from a
    site that has uploaded."""
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    calls = (
        lambda: list(stub.FetchSiteModel(pb.SiteModelRequest(
            federation_id=federation_id, participant_id=f"org-a{k}{filler}"), timeout=60)),
        lambda: stub.Status(pb.StatusRequest(federation_id=f"f{k}-{filler}"), timeout=60),
        lambda: list(stub.FetchSiteModel(pb.SiteModelRequest(
            federation_id=federation_id, participant_id="org-a"), timeout=60)),
        lambda: stub.Status(pb.StatusRequest(federation_id=f"other-{k}"), timeout=60),
        lambda: stub.Withdraw(pb.WithdrawRequest(federation_id=federation_id,
                                                 reason=f"{k}{filler}"), timeout=60),
    )
    return calls[k % len(calls)]


def text_flood(address: str, tls: tuple[Path, Path, Path], federation_id: str, kind: str, *,
               seconds: float, threads: int = 8, connections: int = 4,
               text_bytes: int = 3 << 20) -> CallFloodReport:
    """Make calls carrying ``text_bytes`` of text from ``threads`` threads over ``connections``
    connections for ``seconds``.

    Parameters
    ----------
    address : str
        The analyst's mutual-TLS address (``127.0.0.1:port``).
    tls : (ca, cert, key)
        The attacker's files (a participant's, to reach past the admission).
    federation_id : str
        The federation the analyst serves.
    kind : str
        ``"refusals"``: calls that are refused, cycling through the reasons of
        :func:`_refusal`; ``"withdrawals"``: Withdraw with a reason of ``text_bytes`` bytes of
        two-byte characters (accepted from a site that has not uploaded).
    """
    from noisyanchor.protos.v1 import analyst_pb2 as pb
    from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    report = CallFloodReport()
    lock = threading.Lock()
    channels = [channel(address, tls) for _ in range(connections)]
    filler = "x" * text_bytes
    reason = "\u00e9" * (text_bytes // 2)
    end = time.monotonic() + seconds

    def run(worker: int) -> None:
        stub = pb_grpc.AnalystStub(channels[worker % connections])
        k = worker
        while time.monotonic() < end:
            if kind == "refusals":
                call = _refusal(stub, federation_id, k, filler)
            else:
                call = lambda: stub.Withdraw(pb.WithdrawRequest(  # noqa: E731
                    federation_id=federation_id, reason=reason), timeout=60)
            try:
                call()
                code = "OK"
            except grpc.RpcError as err:
                code = err.code().name
            with lock:
                report.calls += 1
                report.bytes_sent += text_bytes
                report.codes[code] += 1
            k += threads

    began = time.monotonic()
    workers = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(threads)]
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join(seconds + 120)
    finally:
        for c in channels:
            c.close()
    report.seconds = time.monotonic() - began
    return report
