"""The analyst's relay for the anchor agreement: re-publishing what a restarted participant
already sent is a no-op, anything different is refused, and the dealer may seal to itself."""

from __future__ import annotations

import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.errors import AlreadyExistsError, InvalidInputError
from noisyanchor.common.sealing import new_exchange_key, public_bytes, sign_exchange_key
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


def _publish(fed, pki, pid, pub):
    cert, key = pki.clients[pid]
    fed.publish_key(pid, pub, sign_exchange_key(key.read_bytes(), "f", pid, pub),
                    cert.read_bytes())


def test_the_same_key_again_is_a_no_op_and_another_key_is_refused(relay):
    fed, pki = relay
    pub = public_bytes(new_exchange_key())
    _publish(fed, pki, "b", pub)
    stored = fed.list_keys()
    _publish(fed, pki, "b", pub)  # a restarted participant, its kept key, a fresh signature
    assert fed.list_keys() == stored  # the first signed copy is kept
    with pytest.raises(AlreadyExistsError, match="exchange key of 'b'"):
        _publish(fed, pki, "b", public_bytes(new_exchange_key()))
    assert fed.list_keys() == stored


def _share(recipient: str, ciphertext: bytes) -> pb.SealedShare:
    return pb.SealedShare(recipient_id=recipient, nonce=b"n" * 12, ciphertext=ciphertext)


def test_sealed_shares_keep_the_first_copy_per_recipient_and_allow_the_dealers_own(relay):
    fed, _ = relay
    fed.post_sealed("a", [_share("a", b"own")])
    fed.post_sealed("a", [_share("a", b"again"), _share("b", b"to-b"), _share("c", b"to-c")])
    assert [fed.get_sealed(pid).ciphertext for pid in "abc"] == [b"own", b"to-b", b"to-c"]
    assert {fed.get_sealed(pid).dealer_id for pid in "abc"} == {"a"}
    with pytest.raises(AlreadyExistsError, match="another participant"):
        fed.post_sealed("b", [_share("c", b"hijack")])
    with pytest.raises(InvalidInputError, match="'z': not a participant"):
        fed.post_sealed("a", [_share("z", b"x")])
    assert fed.get_sealed("c").ciphertext == b"to-c"
