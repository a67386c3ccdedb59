"""Anchor agreement through the analyst relay: participants whose parameters differ from the
dealer's refuse the sealed seed, and nobody uploads without matching commitments."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from e2e_support import wait_until

from noisyanchor.common.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    IntegrityError,
    UnauthenticatedError,
)
from noisyanchor.common.sealing import (
    new_exchange_key,
    private_bytes,
    public_bytes,
    sign_exchange_key,
)
from noisyanchor.deploy.demo import write_participant
from noisyanchor.deploy.launch import start, stop
from noisyanchor.participant.anchor import exchange_key_path, kept_exchange_key
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.run import run_upload
from noisyanchor.protos.v1 import analyst_pb2 as pb

pytestmark = pytest.mark.e2e

N, D = 12, 4


def _configs(fed, rng, anchors_by_id: dict[str, int], timeout: float):
    configs = []
    for pid, r in anchors_by_id.items():
        fed.files.data[pid] = fed.files.root / f"{pid}.npz"
        np.savez(fed.files.data[pid], x=rng.standard_normal((N, D)), labels=np.zeros(N, int))
        configs.append(load_participant_config(write_participant(
            fed.files, pid, federation_id="e2e", address=f"127.0.0.1:{fed.port}",
            method="aa-igdp", anchors=r, dim=None, projection_seed=None, sigma=0.0, v=0.0,
            timeout=timeout)))
    return configs


def _outcome(cfg):
    try:
        return run_upload(cfg)
    except (IntegrityError, DeadlineExceededError) as err:
        return err


def test_a_participant_with_other_parameters_refuses_the_dealers_seed(analyst, rng):
    # The analyst declares neither r nor d, so only the agreement itself can catch the mismatch.
    fed = analyst(["p0", "p1"], "aa-igdp", dim=None, anchors=None)
    configs = _configs(fed, rng, {"p0": 16, "p1": 20}, timeout=3.0)
    with ThreadPoolExecutor(2) as pool:
        dealer, other = pool.map(_outcome, configs)
    assert isinstance(other, IntegrityError) and "parameters" in str(other)
    assert isinstance(dealer, DeadlineExceededError) and "commit to the anchor" in str(dealer)
    assert not list((fed.files.store / "uploads").iterdir())  # nothing derived was uploaded


def test_agreeing_participants_hold_the_same_seed_and_upload(analyst, rng):
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=16)
    configs = _configs(fed, rng, {"p0": 16, "p1": 16, "p2": 16}, timeout=30.0)
    with ThreadPoolExecutor(3) as pool:
        sent = list(pool.map(run_upload, configs))
    assert [s.participant for s in sent] == ["p0", "p1", "p2"]
    commitments = {p.read_bytes() for p in (fed.files.store / "relay/commitments").iterdir()}
    assert len(commitments) == 1  # one anchor for everyone
    sealed = sorted(p.name for p in (fed.files.store / "relay/sealed").iterdir())
    assert sealed == ["p0.pb", "p1.pb", "p2.pb"]  # the dealer sealed to everyone, itself too
    # Uploads committed: no participant keeps its exchange key any more.
    assert not list((fed.files.root / "state").glob("*/exchange-*.key"))


def test_participants_killed_mid_agreement_resume_it_when_restarted(analyst, rng):
    """p2 dies right after publishing its key; the dealer p0 dies after sealing the seed and
    committing, while it waits for p2's commitment. Both processes are run again: they reuse
    their kept keys, the dealer reopens its own share, and the federation ends with one anchor."""
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=16)
    paths = {c.id: c for c in _configs(fed, rng, {"p0": 16, "p1": 16, "p2": 16}, timeout=60.0)}
    relay, procs = fed.files.store / "relay", []

    def run(pid):
        procs.append(start(["participant", "upload", "--config", fed.files.root / f"{pid}.toml"],
                           fed.files.root / f"{pid}-{len(procs)}.log"))
        return procs[-1]

    def kill(proc):
        proc.kill()
        proc.wait(10)

    try:
        p2 = run("p2")
        assert wait_until(lambda: (relay / "keys/p2.pb").exists())
        kill(p2)
        kept = fed.files.root / "state/p2/exchange-e2e.key"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600  # kept for the restart, owner only
        p0, p1 = run("p0"), run("p1")
        assert wait_until(lambda: (relay / "commitments/p0.bin").exists())
        kill(p0)
        p0, p2 = run("p0"), run("p2")
        assert [p.wait(60) for p in (p0, p1, p2)] == [0, 0, 0]
    finally:
        for proc in procs:
            stop(proc)
    # A dealer that drew a new seed would have been refused its different commitment.
    assert len({p.read_bytes() for p in (relay / "commitments").iterdir()}) == 1
    assert sorted(p.name for p in (fed.files.store / "uploads").iterdir()) == [
        f"{pid}.bundle" for pid in sorted(paths)]


def test_analyst_refuses_an_exchange_key_whose_signature_does_not_verify(analyst):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    pub = public_bytes(new_exchange_key())
    signed_by_p1 = sign_exchange_key(fed.files.pki.clients["p1"][1].read_bytes(), "e2e", "p1",
                                     pub)
    with fed.client("p0") as c, pytest.raises(UnauthenticatedError, match="does not verify"):
        c.call("publish", lambda: c.stub.PublishKey(pb.PublishKeyRequest(
            federation_id="e2e", public_key=pub, signature=signed_by_p1)))
    assert not list((fed.files.store / "relay/keys").iterdir())


def test_a_dealer_restarted_with_other_parameters_refuses_its_earlier_seed(analyst, rng):
    """The dealer seals (to itself first), then dies waiting for p1's commitment; run again with
    another r, it reopens its own share and refuses the seed dealt for the old parameters (the
    analyst declares neither r nor d, so only the agreement can catch it)."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=None, anchors=None)
    pub = public_bytes(new_exchange_key())  # p1 publishes a key and then goes silent
    with fed.client("p1") as c:
        c.call("publish", lambda: c.stub.PublishKey(pb.PublishKeyRequest(
            federation_id="e2e", public_key=pub, signature=sign_exchange_key(
                fed.files.pki.clients["p1"][1].read_bytes(), "e2e", "p1", pub))))
    first = _configs(fed, rng, {"p0": 16}, timeout=2.0)[0]
    with pytest.raises(DeadlineExceededError, match="p1 to commit to the anchor"):
        run_upload(first)
    assert (fed.files.store / "relay/sealed/p0.pb").exists()
    again = _configs(fed, rng, {"p0": 20}, timeout=2.0)[0]
    with pytest.raises(IntegrityError, match="parameters"):
        run_upload(again)


def test_a_rerun_after_the_upload_committed_is_refused_and_forgets_its_key(analyst, rng):
    """A participant that died after its upload committed but before it deleted its exchange
    key is run again: the agreement resumes, the new upload is refused, the key goes."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    configs = _configs(fed, rng, {"p0": 16, "p1": 16}, timeout=30.0)
    key_file = exchange_key_path(configs[1].state_dir, "e2e")
    kept = private_bytes(kept_exchange_key(key_file))
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run_upload, configs))
    assert not key_file.exists()
    key_file.write_bytes(kept)  # as if the first run had died before deleting it
    with pytest.raises(AlreadyExistsError, match="exactly once"):
        run_upload(configs[1])
    assert not key_file.exists()
