"""Connections belong to someone (issue 30, item 1), against a real analyst process over mutual
TLS on 127.0.0.1: one source address or one certificate holding idle connections cannot lock
the other sites out of the port (:mod:`analyst.connection_front`).

The attackers complete TLS with a certificate of the federation CA and then send nothing
(:func:`benchmarks.stream_flood.handshake_flood` with ``tls``), each from its own loopback
address (127.0.0.2, 127.0.0.3: Linux routes all of 127/8 to lo), and reopen every connection
the analyst closes; the honest sites connect from 127.0.0.1 with fresh connections while they
run. The pending-call queue is shared per identity: a participant sending complete calls 32 at a
time on every connection its address may open, never waiting for their answers, cancels no
other site's call. The sizes are CI's; ``benchmarks/bench_flood.py`` measures the honest
latencies at the issue's size (runs ``idle_outsider``, ``idle_participant``,
``pending_queue``). No timing is asserted: the waits are bounded and generous.
"""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
from e2e_support import FEDERATION, random_upload, send

from benchmarks.call_flood import channel
from benchmarks.stream_flood import StatusProbe, handshake_flood, rapid_reset
from noisyanchor.protos.v1 import analyst_pb2 as pb
from noisyanchor.protos.v1 import analyst_pb2_grpc as pb_grpc

pytestmark = pytest.mark.e2e

#: Small limits, so that a CI-sized flood passes every one of them.
SERVER = {"max_connections": 150, "max_connections_per_address": 40,
          "max_connections_per_caller": 3, "connection_claim_timeout": 3.0}


#: Seconds each flood holds (and reopens) its connections: several claim timeouts.
HOLD = 15.0


def _flood(fed, who: str, source: str, reports: dict) -> None:
    cert, key = fed.files.pki.clients[who]
    reports[who] = handshake_flood("127.0.0.1", fed.port, 120, hold=HOLD,
                                   tls=(fed.files.pki.ca, cert, key), source=source,
                                   reopen=True)


def test_idle_connections_of_an_outsider_and_a_participant_do_not_lock_out_a_site(analyst):
    fed = analyst(["p0", "p1", "p2"], extra_certificates=["outsider"], extra={"server": SERVER})
    reports: dict = {}
    attackers = [threading.Thread(target=_flood, args=(fed, who, source, reports))
                 for who, source in (("outsider", "127.0.0.2"), ("p2", "127.0.0.3"))]
    for t in attackers:
        t.start()
    try:
        # Honest sites, each call on a new connection, while both floods hold and reopen theirs
        # (together they try 240 at once, more than max_connections).
        rng = np.random.default_rng(0)
        for pid in ("p0", "p1"):
            with fed.client(pid, timeout=30.0) as client:
                assert client.status().state == "collecting"
                send(client, "aa-igdp", random_upload(rng, 30, 8, 16))
        for _ in range(3):
            with fed.client("p0", timeout=30.0) as client:
                assert list(client.status().committed) == ["p0", "p1"]
    finally:
        for t in attackers:
            t.join(600)  # bounded: each connect times out, the hold ends
    # Both floods ran (how many of their connections were refused or closed while they did
    # depends on how fast this machine let them reopen: the limits' own test is below).
    assert reports["outsider"].opened > 0 and reports["p2"].opened > 0


def test_one_address_holds_its_share_of_connections_and_idle_ones_are_closed(analyst):
    """The per-address cap and the claim timeout, each checked where no timing decides it:
    with a claim timeout far away, one address's connections past its share are refused at
    connect while they are held, and a site from another address still connects; with a short
    one, every idle connection is closed by the analyst (however slowly a loaded machine gets
    there)."""
    share = 10
    fed = analyst(["p0", "p1"], extra_certificates=["outsider"], extra={"server": {
        "max_connections_per_address": share, "connection_claim_timeout": 600.0}})
    tls = (fed.files.pki.ca, *fed.files.pki.clients["outsider"])
    opened, stop, report = threading.Event(), threading.Event(), {}
    holder = threading.Thread(target=lambda: report.update(flood=handshake_flood(
        "127.0.0.1", fed.port, share + 5, hold=600.0, tls=tls, source="127.0.0.2",
        stop=stop, opened=opened)))
    holder.start()
    try:
        assert opened.wait(600)
        with fed.client("p0", timeout=60.0) as client:
            assert client.status().state == "collecting"
    finally:
        stop.set()
        holder.join(600)
    flood = report["flood"]
    assert (flood.opened, flood.refused) == (share, 5), flood.to_json()
    fed = analyst(["p0", "p1"], extra_certificates=["outsider"], extra={"server": {
        "max_connections_per_address": share, "connection_claim_timeout": 2.0}})
    tls = (fed.files.pki.ca, *fed.files.pki.clients["outsider"])
    flood = handshake_flood("127.0.0.1", fed.port, share, hold=600.0, tls=tls,
                            source="127.0.0.2")  # returns once the analyst closed them all
    assert flood.opened == share and flood.still_open == 0, flood.to_json()
    assert len(flood.held_seconds) == share


def _channel(fed, pid: str) -> grpc.Channel:
    """A channel with a connection of its own (no subchannel shared with another channel)."""
    return channel(f"127.0.0.1:{fed.port}", (fed.files.pki.ca, *fed.files.pki.clients[pid]))


def test_a_participant_has_its_share_of_connections_and_an_outsider_none(analyst):
    fed = analyst(["p0", "p1"], extra_certificates=["outsider"], extra={"server": SERVER})
    request = pb.StatusRequest(federation_id=FEDERATION)
    channels = [_channel(fed, "p1") for _ in range(SERVER["max_connections_per_caller"] + 1)]
    try:
        for channel in channels[:-1]:
            pb_grpc.AnalystStub(channel).Status(request, timeout=30)
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.AnalystStub(channels[-1]).Status(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_connections_per_caller = 3" in refused.value.details()
        # Another participant keeps its own share.
        with _channel(fed, "p0") as other:
            pb_grpc.AnalystStub(other).Status(request, timeout=30)
        # An outsider's connection is closed after its first refusal: the next call on the
        # same channel finds it closing (UNAVAILABLE), or a new connection refused again.
        with _channel(fed, "outsider") as outsider:
            codes = []
            for _ in range(2):
                with pytest.raises(grpc.RpcError) as denied:
                    pb_grpc.AnalystStub(outsider).Status(request, timeout=30)
                codes.append(denied.value.code())
        assert codes[0] == grpc.StatusCode.PERMISSION_DENIED
        assert codes[1] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED)
    finally:
        for channel in channels:
            channel.close()


#: Limits of the pending-call test: the configured queue is far below what one address's
#: connections can hold (``max_connections_per_address x max_streams_per_connection``), so only
#: the analyst's raising of it (:func:`analyst.server.pending_calls`) keeps the honest calls in.
PENDING_SERVER = {"max_pending_calls": 16, "max_connections_per_address": 24,
                  "max_connections_per_caller": 3, "connection_claim_timeout": 5.0}


def test_one_identity_filling_the_pending_queue_cancels_no_other_sites_call(analyst):
    """Issue 30, item 1: 24 connections x 32 complete Status calls at a time from p2 (from its
    own address, each connection reopened when the analyst closes it), never waiting for an
    answer, while p0 and p1 call Status and Describe on kept connections: none of their calls
    is cancelled or refused, and p2 is served again afterwards. (With gRPC's random drops
    starting at half the raised count, as before, about one run in three cancelled an honest
    call.)"""
    fed = analyst(["p0", "p1", "p2"], extra={"server": PENDING_SERVER})
    cert, key = fed.files.pki.clients["p2"]
    with fed.client("p0", timeout=60.0) as a, fed.client("p1", timeout=60.0) as b, \
            StatusProbe(a, FEDERATION, interval=0.02, timeout=60.0) as status, \
            StatusProbe(b, FEDERATION, 0.02, call=lambda: b.stub.Describe(
                pb.DescribeRequest(federation_id=FEDERATION), timeout=60.0)) as describe:
        flood = rapid_reset("127.0.0.1", fed.port, (fed.files.pki.ca, cert, key), "localhost",
                            48_000, batch=32, connections=24, reset=False, timeout=120,
                            source="127.0.0.2")
    assert flood.streams_sent == 48_000, flood.to_json()
    assert flood.connections >= 24
    for probe in (status, describe):
        assert probe.errors == [], probe.errors[:5]
        assert probe.samples
    with fed.client("p2", timeout=60.0) as c:
        assert c.status().state == "collecting"
    assert "Traceback" not in fed.log.read_text()


#: A site process that claims its whole share of connections (one Status call on each), says
#: so, and waits to be killed.
_SITE = """
import sys, time, grpc
from noisyanchor.protos.v1 import analyst_pb2 as pb, analyst_pb2_grpc as pb_grpc
port, ca, cert, key, count, fid = sys.argv[1:7]
creds = grpc.ssl_channel_credentials(open(ca, 'rb').read(), open(key, 'rb').read(),
                                     open(cert, 'rb').read())
channels = [grpc.secure_channel(f'127.0.0.1:{port}', creds, options=[
    ('grpc.ssl_target_name_override', 'localhost'), ('grpc.use_local_subchannel_pool', 1)])
    for _ in range(int(count))]
for channel in channels:
    pb_grpc.AnalystStub(channel).Status(pb.StatusRequest(federation_id=fid), timeout=30)
print('ready', flush=True)
time.sleep(600)
"""


def test_a_site_killed_while_holding_its_share_is_admitted_again_when_it_restarts(analyst):
    """A crashed site process (SIGKILL: no goodbye from gRPC) gives its connections back,
    so the restarted site is not refused for the share its dead process held."""
    import signal
    import subprocess
    import sys
    import time

    fed = analyst(["p0", "p1"], extra={"server": SERVER})
    cert, key = fed.files.pki.clients["p1"]
    site = subprocess.Popen([sys.executable, "-c", _SITE, str(fed.port), str(fed.files.pki.ca),
                             str(cert), str(key), str(SERVER["max_connections_per_caller"]),
                             FEDERATION], stdout=subprocess.PIPE, text=True)
    request = pb.StatusRequest(federation_id=FEDERATION)
    try:
        assert site.stdout.readline().strip() == "ready"
        with _channel(fed, "p1") as extra, pytest.raises(grpc.RpcError) as refused:
            pb_grpc.AnalystStub(extra).Status(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # the share is held
        site.send_signal(signal.SIGKILL)
        site.wait(30)
        deadline = time.monotonic() + 60  # at once in practice: the kernel closed the sockets
        while True:
            with _channel(fed, "p1") as restarted:
                try:
                    assert pb_grpc.AnalystStub(restarted).Status(request, timeout=30).state
                    break
                except grpc.RpcError as err:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"the restarted site is still refused: {err}") \
                            from None
            time.sleep(0.5)
    finally:
        site.kill()
        site.wait(30)
