"""The site's agreement machine (participant.core.agreement) driven against the analyst's core
(analyst.core.federation) by plain calls, no server: three sites agree on one seed the relay
never holds, a restarted dealer reopens its seed, and a forged or misplaced reply is refused."""

from __future__ import annotations

import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import NotFoundError, UnauthenticatedError
from noisyanchor.common.protocol_messages import SignedKey
from noisyanchor.common.sealing import new_exchange_key
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire_messages import PROTO_CODEC
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.core.agreement import (
    Agreed,
    FetchShare,
    ListCommitments,
    ListKeys,
    PostShares,
    ProtocolStateError,
    PublishCommitment,
    PublishKey,
    SeedAgreement,
    SharedParameters,
)

SITES = ("a", "b", "c")
PARAMS = SharedParameters("aa-igdp", 12, 5, 1.0)
WAIT = object()  # the relay does not hold what the action waits for yet


@pytest.fixture
def relay(tmp_path):
    pki = write_pki(tmp_path / "pki", SITES)
    cfg = AnalystConfig(federation_id="f", participants=SITES, method="aa-igdp", anchors=12,
                        dim=5, sigma=0.0, v=0.0, reference="a", max_iter=10, tol=1e-9,
                        output_dir=tmp_path / "store",
                        tls=TlsFiles(pki.ca, pki.server_cert, pki.server_key))
    return Federation(cfg, Store(tmp_path / "store")), pki


def _machine(pki, pid, key=None, dealer_seed=None):
    return SeedAgreement(federation_id="f", participant_id=pid, dealer="a", expected=SITES,
                         exchange_key=key or new_exchange_key(),
                         tls_key_pem=pki.clients[pid][1].read_bytes(),
                         ca_pem=pki.ca.read_bytes(), params=PARAMS, codec=PROTO_CODEC,
                         dealer_seed=dealer_seed)


def _perform(fed, pki, pid, action):
    """What a transport does for ``action`` of site ``pid``, with the core called directly."""
    cert = pki.clients[pid][0].read_bytes()
    if isinstance(action, ListKeys):
        keys = fed.list_keys()
        return keys if set(action.wanted) <= {k.participant_id for k in keys} else WAIT
    if isinstance(action, PublishKey):
        return fed.publish_key(pid, action.public_key, action.signature, action.bound_to, cert)
    if isinstance(action, FetchShare):
        try:
            return fed.get_sealed(pid)
        except NotFoundError:
            return WAIT if action.wait else None
    if isinstance(action, PostShares):
        return fed.post_sealed(pid, action.shares, cert)
    if isinstance(action, PublishCommitment):
        return fed.publish_commitment(pid, action.digest, action.signature, cert)
    assert isinstance(action, ListCommitments)
    listed = fed.list_commitments()
    return listed if set(action.expected) <= {c.participant_id for c in listed} else WAIT


def _run(fed, pki, machines):
    """Step every site in turn until all agreed: ``{site: seed}``."""
    actions = {pid: m.start() for pid, m in machines.items()}
    for _ in range(100):
        for pid, machine in machines.items():
            if not isinstance(actions[pid], Agreed):
                reply = _perform(fed, pki, pid, actions[pid])
                if reply is not WAIT:
                    actions[pid] = machine.receive(reply)
        if all(isinstance(a, Agreed) for a in actions.values()):
            return {pid: a.seed for pid, a in actions.items()}
    raise AssertionError(f"no agreement: {actions}")


def test_three_sites_agree_on_one_seed_the_relay_never_holds(relay, tmp_path):
    fed, pki = relay
    seeds = _run(fed, pki, {pid: _machine(pki, pid) for pid in SITES})
    assert len(set(seeds.values())) == 1 and len(seeds["a"]) == 32
    stored = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert seeds["a"] not in stored


def test_a_restarted_dealer_reopens_the_seed_it_sealed(relay):
    fed, pki = relay
    keys = {pid: new_exchange_key() for pid in SITES}
    first = _run(fed, pki, {pid: _machine(pki, pid, keys[pid]) for pid in SITES})
    again = _run(fed, pki, {"a": _machine(pki, "a", keys["a"], dealer_seed=b"\x01" * 32)})
    assert again["a"] == first["a"]  # reopened from its own share, not the new one


def test_a_dealer_key_signed_by_another_site_is_refused_naming_it(relay):
    fed, pki = relay
    dealer = _machine(pki, "a")
    fed.publish_key("a", *_published(dealer.start()), pki.clients["a"][0].read_bytes())
    b = _machine(pki, "b")
    b.start()
    stored = fed.list_keys()[0]
    forged = SignedKey("a", stored.public_key, stored.signature,
                       pki.clients["c"][0].read_bytes(), b"")
    with pytest.raises(UnauthenticatedError, match="signed as 'a' comes with the certificate "
                       "of 'c'"):
        b.receive([forged])


def test_a_reply_the_state_does_not_expect_is_refused(relay):
    _, pki = relay
    machine = _machine(pki, "b")
    assert isinstance(machine.start(), ListKeys)
    with pytest.raises(ProtocolStateError, match="SignedKey list"):
        machine.receive(None)
    with pytest.raises(ProtocolStateError, match="state 'dealer key', not 'start'"):
        machine.start()


def _published(action):
    assert isinstance(action, PublishKey)
    return action.public_key, action.signature, action.bound_to
