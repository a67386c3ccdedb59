"""Anchor agreement through the analyst relay: participants whose parameters differ from the
dealer's refuse the sealed seed, and nobody uploads without matching commitments."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from e2e_support import free_port, wait_until

from noisyanchor.common.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    IntegrityError,
    NoisyAnchorError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from noisyanchor.common.sealing import (
    new_exchange_key,
    open_sealed,
    private_bytes,
    public_bytes,
    seal,
    share_statement,
    sign_exchange_key,
    sign_statement,
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


def published_key(fed, pid: str = "p0") -> bytes:
    """``pid``'s (default: the dealer's) published X25519 key, once it is at the relay (bounded
    wait)."""
    path = fed.files.store / "relay" / "keys" / f"{pid}.pb"
    assert wait_until(path.exists)
    return pb.SignedKey.FromString(path.read_bytes()).public_key


def publish_key(fed, pid: str, pub: bytes, *, bound_to: bytes) -> None:
    """``pid`` publishes ``pub`` signed with its TLS key, bound to ``bound_to``."""
    signature = sign_exchange_key(fed.files.pki.clients[pid][1].read_bytes(), "e2e", pid, pub,
                                  bound_to=bound_to)
    with fed.client(pid) as c:
        c.call("publish", lambda: c.stub.PublishKey(pb.PublishKeyRequest(
            federation_id="e2e", public_key=pub, signature=signature, bound_to=bound_to)))


def _outcome(cfg):
    """The upload's result or the project error that refused it."""
    try:
        return run_upload(cfg)
    except NoisyAnchorError as err:
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
    commitments = {p.read_bytes() for p in (fed.files.store / "relay/commitments").glob("*.bin")}
    assert len(commitments) == 1  # one anchor for everyone
    sealed = sorted(p.name for p in (fed.files.store / "relay/sealed").iterdir())
    assert sealed == ["p0.pb", "p1.pb", "p2.pb"]  # the dealer sealed to everyone, itself too
    # Uploads committed: each participant keeps its exchange key (a screening refusal would
    # send it back to this agreement) until it fetches its site model.
    assert all(exchange_key_path(c.state_dir, "e2e").is_file() for c in configs)


def test_participants_killed_mid_agreement_resume_it_when_restarted(analyst, rng):
    """p2 dies right after publishing its key (bound to the dealer's); the dealer p0 dies after
    sealing the seed and committing, while it waits for p2's commitment. Both processes are run
    again: they reuse their kept keys, the dealer reopens its own share and seals it again to
    the same keys, and the federation ends with one anchor."""
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
        p0, p2 = run("p0"), run("p2")
        assert wait_until(lambda: (relay / "keys/p2.pb").exists())
        kill(p2)
        kept = fed.files.root / "state/p2/exchange-e2e.key"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600  # kept for the restart, owner only
        p1 = run("p1")
        assert wait_until(lambda: (relay / "commitments/p0.bin").exists())
        kill(p0)
        p0, p2 = run("p0"), run("p2")
        assert [p.wait(60) for p in (p0, p1, p2)] == [0, 0, 0]
    finally:
        for proc in procs:
            stop(proc)
    # A dealer that drew a new seed would have been refused its different commitment.
    assert len({p.read_bytes() for p in (relay / "commitments").glob("*.bin")}) == 1
    assert sorted(p.name for p in (fed.files.store / "uploads").iterdir()) == [
        f"{pid}.bundle" for pid in sorted(paths)]


def test_analyst_refuses_an_exchange_key_whose_signature_does_not_verify(analyst):
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    pub = public_bytes(new_exchange_key())
    signed_by_p1 = sign_exchange_key(fed.files.pki.clients["p1"][1].read_bytes(), "e2e", "p1",
                                     pub, bound_to=b"")
    with fed.client("p0") as c, pytest.raises(UnauthenticatedError, match="does not verify"):
        c.call("publish", lambda: c.stub.PublishKey(pb.PublishKeyRequest(
            federation_id="e2e", public_key=pub, signature=signed_by_p1)))
    assert not list((fed.files.store / "relay/keys").iterdir())


def test_a_dealer_restarted_with_other_parameters_refuses_its_earlier_seed(analyst, rng):
    """The dealer seals (to itself first), then dies waiting for p1's commitment; run again with
    another r, it reopens its own share and refuses the seed dealt for the old parameters (the
    analyst declares neither r nor d, so only the agreement can catch it)."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=None, anchors=None)
    first = _configs(fed, rng, {"p0": 16}, timeout=5.0)[0]
    with ThreadPoolExecutor(1) as pool:
        dealer = pool.submit(_outcome, first)
        # p1 publishes a key bound to the dealer's and then goes silent.
        publish_key(fed, "p1", public_bytes(new_exchange_key()), bound_to=published_key(fed))
        outcome = dealer.result()
    assert isinstance(outcome, DeadlineExceededError), outcome
    assert "p1 to commit to the anchor" in str(outcome)
    assert (fed.files.store / "relay/sealed/p0.pb").exists()
    again = _configs(fed, rng, {"p0": 20}, timeout=2.0)[0]
    with pytest.raises(IntegrityError, match="parameters"):
        run_upload(again)


def test_a_rerun_after_the_upload_committed_is_refused_and_forgets_its_key(analyst, rng):
    """A participant keeps its exchange key after its upload committed (a screening refusal
    would send it back to the agreement) and is run again while its upload stands: answered at
    once from its kept receipt (issue 34), nothing sent; without the receipt (a state folder
    restored from before), the agreement resumes, the new upload is refused, the key goes."""
    from noisyanchor.participant.local_state import receipt_path

    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    configs = _configs(fed, rng, {"p0": 16, "p1": 16}, timeout=30.0)
    key_file = exchange_key_path(configs[1].state_dir, "e2e")
    kept = private_bytes(kept_exchange_key(key_file))
    with ThreadPoolExecutor(2) as pool:
        first = list(pool.map(run_upload, configs))[1]
    assert private_bytes(kept_exchange_key(key_file)) == kept
    again = run_upload(configs[1])
    assert again.kept_receipt is not None and again.receipt == first.receipt
    receipt_path(configs[1]).unlink()
    with pytest.raises(AlreadyExistsError, match="exactly once"):
        run_upload(configs[1])
    assert not key_file.exists()


# -- hostile insiders (issue 9, item 2 and the key-freshness weakness) ----------------------------
def _relay_files(fed, folder: str) -> list[str]:
    return sorted(p.name for p in (fed.files.store / "relay" / folder).iterdir())


def _plant(fed, folder: str, pid: str, message) -> None:
    """A compromised analyst serves ``message`` as ``pid``'s relay object."""
    (fed.files.store / "relay" / folder / f"{pid}.pb").write_bytes(
        message.SerializeToString(deterministic=True))


def _old_statement(fed, pid: str, bound_to: bytes):
    """``pid``'s key statement from an earlier agreement under the same federation id (its
    X25519 private key since leaked): genuinely signed, but not for this agreement."""
    key = new_exchange_key()
    pub = public_bytes(key)
    cert, tls_key = fed.files.pki.clients[pid]
    return key, pb.SignedKey(participant_id=pid, public_key=pub, bound_to=bound_to,
                             certificate_pem=cert.read_bytes(),
                             signature=sign_exchange_key(tls_key.read_bytes(), "e2e", pid, pub,
                                                         bound_to=bound_to))


def test_a_participant_that_is_not_the_dealer_cannot_deal(analyst, rng):
    """p1 posts junk shares for everyone before the dealer: refused (the analyst config names
    p0), nothing is kept, and after a restart the real agreement and the uploads go through."""
    fed = analyst(["p0", "p1", "p2"], "aa-igdp", dim=D, anchors=16, port=free_port())
    junk = [pb.SealedShare(recipient_id=pid, nonce=b"n" * 12, ciphertext=b"junk" * 8,
                           signature=b"s" * 64) for pid in ("p0", "p1", "p2")]
    with fed.client("p1") as c, pytest.raises(
            PermissionDeniedError, match="PERMISSION_DENIED: only the dealer 'p0' named in the "
                                         "analyst config may post sealed shares, not 'p1'"):
        c.call("post shares", lambda: c.stub.PostSealed(pb.PostSealedRequest(
            federation_id="e2e", shares=junk)))
    assert _relay_files(fed, "sealed") == []
    fed.kill()
    fed.restart()
    configs = _configs(fed, rng, {"p0": 16, "p1": 16, "p2": 16}, timeout=60.0)
    with ThreadPoolExecutor(3) as pool:
        sent = list(pool.map(run_upload, configs))
    assert [s.participant for s in sent] == ["p0", "p1", "p2"]
    assert len({p.read_bytes() for p in (fed.files.store / "relay/commitments").glob("*.bin")}) == 1


def test_a_recipient_refuses_a_share_the_dealer_did_not_sign_for_its_key(analyst, rng):
    """A compromised analyst holds the dealer's X25519 key of an earlier agreement (leaked)
    under the same federation id: it serves that genuinely signed old key as the dealer's, and
    seals a seed it knows to p1's new key. The share opens, but the dealer never signed it for
    this key: p1 refuses it and commits to and uploads nothing."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    leaked, old_dealer = _old_statement(fed, "p0", b"")
    _plant(fed, "keys", "p0", old_dealer)
    cfg = _configs(fed, rng, {"p1": 16}, timeout=10.0)[0]
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(_outcome, cfg)
        p1_key = published_key(fed, "p1")  # p1 published its key, bound to the old dealer key
        nonce, ct = seal(leaked, p1_key, "e2e", "p0", "p1", pb.AnchorSecret(
            seed=b"k" * 32, method="aa-igdp", anchors=16, dim=D,
            translation_scale=100.0).SerializeToString())
        # The best signature the relay has: the dealer's, on a share for an earlier key of p1.
        stale = sign_statement(fed.files.pki.clients["p0"][1].read_bytes(), share_statement(
            "e2e", "p0", "p1", old_dealer.public_key, public_bytes(new_exchange_key()), nonce, ct))
        _plant(fed, "sealed", "p1", pb.SealedShare(dealer_id="p0", recipient_id="p1",
                                                   nonce=nonce, ciphertext=ct, signature=stale))
        outcome = victim.result()
    assert isinstance(outcome, UnauthenticatedError), outcome
    assert "the signature on the sealed share from 'p0' to 'p1'" in str(outcome)
    assert "does not verify" in str(outcome)
    # Only the signature stopped it: the share opens with p1's kept exchange key.
    p1_private = kept_exchange_key(exchange_key_path(cfg.state_dir, "e2e"))
    assert open_sealed(p1_private, old_dealer.public_key, "e2e", "p0", "p1", nonce, ct)
    assert _relay_files(fed, "commitments") == []
    assert not list((fed.files.store / "uploads").iterdir())


def test_the_dealer_refuses_a_key_statement_replayed_from_an_earlier_agreement(analyst, rng):
    """A compromised analyst serves p1's genuinely signed key of an earlier agreement (under
    the same federation id; its private key leaked) instead of asking p1: the statement is
    bound to an old dealer key, so the dealer refuses it and seals nothing to anyone."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    _, replayed = _old_statement(fed, "p1", bound_to=public_bytes(new_exchange_key()))
    _plant(fed, "keys", "p1", replayed)
    dealer = _configs(fed, rng, {"p0": 16}, timeout=10.0)[0]
    with pytest.raises(UnauthenticatedError, match="exchange key of 'p1' is bound to another "
                                                   "dealer key than this agreement's"):
        run_upload(dealer)
    assert _relay_files(fed, "sealed") == []  # not even the dealer's own share


def test_a_dealer_never_seals_its_seed_again_to_a_changed_key(analyst, rng):
    """The dealer seals its seed to p1's key and dies waiting for commitments. p1 then shows up
    with another key (validly signed: its state was lost); the honest relay refuses it, so a
    compromised one swaps it in and drops p1's share. The restarted dealer reopens its seed and
    refuses to seal it to the changed key."""
    fed = analyst(["p0", "p1"], "aa-igdp", dim=D, anchors=16)
    first = _configs(fed, rng, {"p0": 16}, timeout=5.0)[0]
    with ThreadPoolExecutor(1) as pool:
        dealer = pool.submit(_outcome, first)
        bound = published_key(fed)
        publish_key(fed, "p1", public_bytes(new_exchange_key()), bound_to=bound)
        assert isinstance(dealer.result(), DeadlineExceededError)
    assert _relay_files(fed, "sealed") == ["p0.pb", "p1.pb"]
    changed = public_bytes(new_exchange_key())
    with pytest.raises(AlreadyExistsError, match="exchange key of 'p1' was already published"):
        publish_key(fed, "p1", changed, bound_to=bound)
    cert, tls_key = fed.files.pki.clients["p1"]
    _plant(fed, "keys", "p1", pb.SignedKey(
        participant_id="p1", public_key=changed, bound_to=bound,
        certificate_pem=cert.read_bytes(), signature=sign_exchange_key(
            tls_key.read_bytes(), "e2e", "p1", changed, bound_to=bound)))
    (fed.files.store / "relay/sealed/p1.pb").unlink()
    with pytest.raises(IntegrityError, match=r"exchange key\(s\) of \['p1'\] changed since this "
                                             "dealer sealed its seed"):
        run_upload(first)
    assert _relay_files(fed, "sealed") == ["p0.pb"]

