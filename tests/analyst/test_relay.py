"""The analyst's relay for the anchor agreement: re-publishing what a restarted participant
already sent is a no-op, anything different is refused, keys are bound to the dealer's, and only
the configured dealer may post shares, each signed over both keys (issue 9, item 2)."""

from __future__ import annotations

import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import (
    AlreadyExistsError,
    InvalidInputError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from noisyanchor.common.sealing import (
    new_exchange_key,
    public_bytes,
    seal,
    share_statement,
    sign_exchange_key,
    sign_statement,
)
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.deploy.certs import write_pki
from noisyanchor.protos.v1 import analyst_pb2 as pb


@pytest.fixture
def relay(tmp_path):
    pki = write_pki(tmp_path / "pki", ["a", "b", "c"])
    cfg = AnalystConfig(federation_id="f", participants=("a", "b", "c"), method="aa-igdp",
                        anchors=12, dim=5, sigma=0.0, v=0.0, reference="a", max_iter=10,
                        tol=1e-9, output_dir=tmp_path / "store",
                        tls=TlsFiles(pki.ca, pki.server_cert, pki.server_key))
    return Federation(cfg, Store(tmp_path / "store")), pki


def _publish(fed, pki, pid, pub, bound_to=None):
    """Publish ``pid``'s key, bound to the dealer's stored key unless ``bound_to`` is given."""
    if bound_to is None:
        bound_to = b"" if pid == "a" else fed.list_keys()[0].public_key
    cert, key = pki.clients[pid]
    fed.publish_key(pid, pub, sign_exchange_key(key.read_bytes(), "f", pid, pub,
                                                bound_to=bound_to),
                    bound_to, cert.read_bytes())


def test_the_same_key_again_is_a_no_op_and_another_key_is_refused(relay):
    fed, pki = relay
    _publish(fed, pki, "a", public_bytes(new_exchange_key()))
    pub = public_bytes(new_exchange_key())
    _publish(fed, pki, "b", pub)
    stored = fed.list_keys()
    _publish(fed, pki, "b", pub)  # a restarted participant, its kept key, a fresh signature
    assert fed.list_keys() == stored  # the first signed copy is kept
    with pytest.raises(AlreadyExistsError, match="exchange key of 'b'"):
        _publish(fed, pki, "b", public_bytes(new_exchange_key()))
    assert fed.list_keys() == stored


def test_keys_are_bound_to_the_dealers_published_key(relay):
    fed, pki = relay
    pub = public_bytes(new_exchange_key())
    with pytest.raises(PreconditionError, match="dealer 'a' has not published"):
        _publish(fed, pki, "b", pub, bound_to=b"")
    with pytest.raises(InvalidInputError, match="dealer 'a' binds its exchange key to nothing"):
        _publish(fed, pki, "a", pub, bound_to=pub)
    assert fed.list_keys() == []
    _publish(fed, pki, "a", public_bytes(new_exchange_key()))
    with pytest.raises(UnauthenticatedError, match="'b' is bound to another key"):
        _publish(fed, pki, "b", pub, bound_to=public_bytes(new_exchange_key()))
    assert [k.participant_id for k in fed.list_keys()] == ["a"]


def _shares(pki, fed, recipients, dealer_key, *, signer="a"):
    """Shares from the dealer ``a`` (its X25519 key ``dealer_key``), signed by ``signer``."""
    keys = {k.participant_id: k.public_key for k in fed.list_keys()}
    shares = []
    for pid in recipients:
        nonce, ct = seal(dealer_key, keys[pid], "f", "a", pid, f"seed for {pid}".encode())
        sig = sign_statement(pki.clients[signer][1].read_bytes(), share_statement(
            "f", "a", pid, public_bytes(dealer_key), keys[pid], nonce, ct))
        shares.append(pb.SealedShare(recipient_id=pid, nonce=nonce, ciphertext=ct,
                                     signature=sig))
    return shares


@pytest.fixture
def keyed(relay):
    """Every participant's key published; the dealer's private key."""
    fed, pki = relay
    dealer = new_exchange_key()
    _publish(fed, pki, "a", public_bytes(dealer))
    for pid in "bc":
        _publish(fed, pki, pid, public_bytes(new_exchange_key()))
    return fed, pki, dealer


def test_sealed_shares_keep_the_first_copy_per_recipient_and_allow_the_dealers_own(keyed):
    fed, pki, dealer = keyed
    a_cert = pki.clients["a"][0].read_bytes()
    own = _shares(pki, fed, "a", dealer)
    fed.post_sealed("a", own, a_cert)
    rest = _shares(pki, fed, "abc", dealer)
    fed.post_sealed("a", rest, a_cert)
    assert [fed.get_sealed(pid).ciphertext for pid in "abc"] == [
        own[0].ciphertext, rest[1].ciphertext, rest[2].ciphertext]
    assert {fed.get_sealed(pid).dealer_id for pid in "abc"} == {"a"}
    assert fed.get_sealed("b").signature == rest[1].signature  # relayed for the recipient


def test_only_the_configured_dealer_may_post_and_only_shares_it_signed(keyed):
    fed, pki, dealer = keyed
    b_cert, a_cert = pki.clients["b"][0].read_bytes(), pki.clients["a"][0].read_bytes()
    with pytest.raises(PermissionDeniedError, match="only the dealer 'a' named in the analyst "
                                                    "config may post sealed shares, not 'b'"):
        fed.post_sealed("b", _shares(pki, fed, "c", dealer, signer="b"), b_cert)
    forged = _shares(pki, fed, "bc", dealer)
    forged[1].signature = _shares(pki, fed, "c", dealer, signer="b")[0].signature
    with pytest.raises(UnauthenticatedError, match="share from 'a' to 'c' does not verify"):
        fed.post_sealed("a", forged, a_cert)  # one bad share: none is stored
    swapped = _shares(pki, fed, "b", dealer)
    swapped[0].ciphertext += b"x"
    with pytest.raises(UnauthenticatedError, match="does not verify"):
        fed.post_sealed("a", swapped, a_cert)
    with pytest.raises(InvalidInputError, match="'z': not a participant"):
        fed.post_sealed("a", [pb.SealedShare(recipient_id="z")], a_cert)
    assert list(fed.store.sealed.iterdir()) == []
