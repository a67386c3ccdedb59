"""The agreement machine run on snapshots of the relay (participant/relay_view.py), as the
Flower ClientApp runs it: each round every site gets the relay as it stands, runs a fresh
machine on it (its exchange key kept) and hands back its writes; the rounds end with one seed
at every site, and a site stops where it must wait, naming for whom. No Flower, no server."""

from __future__ import annotations

from noisyanchor.analyst.federation import Federation
from noisyanchor.common.errors import NotFoundError
from noisyanchor.common.sealing import new_exchange_key
from noisyanchor.participant.core.agreement import PostShares, PublishKey
from noisyanchor.participant.relay_view import Snapshot, step
from tests.participant.test_seed_agreement import SITES, _machine


def _snapshot(fed: Federation, pid: str) -> Snapshot:
    try:
        share = fed.get_sealed(pid)
    except NotFoundError:
        share = None
    return Snapshot(tuple(fed.list_keys()), tuple(fed.list_commitments()), share)


def _relay(fed: Federation, pki, pid: str, writes) -> None:
    cert = pki.clients[pid][0].read_bytes()
    for w in writes:
        if isinstance(w, PublishKey):
            fed.publish_key(pid, w.public_key, w.signature, w.bound_to, cert)
        elif isinstance(w, PostShares):
            fed.post_sealed(pid, w.shares, cert)
        else:
            fed.publish_commitment(pid, w.digest, w.signature, cert)


def test_rounds_of_snapshots_end_with_one_seed_at_every_site(relay):
    fed, pki = relay
    keys = {pid: new_exchange_key() for pid in SITES}  # kept across rounds, as on disk
    seeds, rounds = {}, 0
    while len(seeds) < len(SITES):
        rounds += 1
        assert rounds <= 6, "the agreement made no progress"
        snapshots = {pid: _snapshot(fed, pid) for pid in SITES}  # one message per site
        for pid in SITES:
            done = step(_machine(pki, pid, keys[pid]), snapshots[pid])
            _relay(fed, pki, pid, done.sent)
            if done.seed is not None:
                seeds[pid] = done.seed
    assert len(set(seeds.values())) == 1 and len(seeds["a"]) == 32
    assert rounds == 5  # dealer's key, the others', the shares, the commitments, the last look


def test_a_site_stops_where_it_waits_and_names_for_whom(relay):
    fed, pki = relay
    done = step(_machine(pki, "b", new_exchange_key()), _snapshot(fed, "b"))
    assert done.sent == () and done.seed is None
    assert done.waiting.who == ("a",)  # b's key is bound to the dealer's: it waits for a's
    dealer = step(_machine(pki, "a", new_exchange_key()), _snapshot(fed, "a"))
    assert [type(w) for w in dealer.sent] == [PublishKey]
    assert dealer.waiting.who == ("b", "c")  # the dealer seals once the others' keys are in
