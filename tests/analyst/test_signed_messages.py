"""The analyst's core checks each site's statements against the federation CA, not the
transport's word (issue 32, item 3): an upload (its receipt), a commitment and a site-model
request signed by another site's key, unsigned, or altered after signing are refused with an
UnauthenticatedError naming the site, and nothing is stored."""

from __future__ import annotations

import numpy as np
import pytest

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.federation import Federation
from noisyanchor.analyst.storage import Store
from noisyanchor.common.bundles import BundleStream, bundle_spec, iter_chunks, receipt
from noisyanchor.common.errors import IntegrityError, PreconditionError, UnauthenticatedError
from noisyanchor.common.signed_statements import (
    commitment_statement,
    sign,
    site_model_statement,
)
from noisyanchor.common.tomlconfig import TlsFiles
from noisyanchor.common.wire import PROTO_HEADERS
from noisyanchor.deploy.certs import write_pki
from noisyanchor.participant.core.upload import SiteSigner

N, D, R = 20, 5, 12


@pytest.fixture
def signed(tmp_path):
    pki = write_pki(tmp_path / "pki", ["a", "b"])
    cfg = AnalystConfig(federation_id="f", participants=("a", "b"), method="aa-igdp",
                        anchors=R, dim=D, sigma=0.0, v=0.0, reference="a", max_iter=10,
                        tol=1e-9, output_dir=tmp_path / "store",
                        tls=TlsFiles(pki.ca, pki.server_cert, pki.server_key))
    fed = Federation(cfg, Store(tmp_path / "store"))
    cert = {pid: pki.clients[pid][0].read_bytes() for pid in ("a", "b")}
    key = {pid: pki.clients[pid][1].read_bytes() for pid in ("a", "b")}
    return fed, cert, key


def _arrays(rng):
    return {"data": rng.standard_normal((N, D)), "anchor": rng.standard_normal((R, D)),
            "labels": np.arange(N, dtype="<i8") % 2, "tags": np.zeros(N, dtype="|i1")}


def _upload_signature(key: bytes, pid: str, arrays) -> bytes:
    """What a site's core signs (participant.core.upload.SiteSigner)."""
    return SiteSigner("f", pid, key, PROTO_HEADERS).bundle_signature(
        "upload", bundle_spec("f", "aa-igdp", arrays))


def _upload(fed, pid, arrays, signature, cert, *, trailer=False):
    spec = bundle_spec("f", "aa-igdp", arrays)
    stream = BundleStream(spec.without_digests() if trailer else spec, iter_chunks(arrays),
                          [a.sha256 for a in spec.arrays] if trailer else None, signature)
    return fed.upload(pid, stream, cert)


@pytest.mark.parametrize("trailer", [False, True])
def test_an_upload_signed_by_its_site_commits_and_a_retry_is_checked_too(signed, rng, trailer):
    fed, cert, key = signed
    arrays = _arrays(rng)
    signature = _upload_signature(key["a"], "a", arrays)
    first = _upload(fed, "a", arrays, signature, cert["a"], trailer=trailer)
    assert not first.already_committed
    assert _upload(fed, "a", arrays, signature, cert["a"], trailer=trailer).already_committed
    with pytest.raises(UnauthenticatedError, match="the upload of 'a' is not signed"):
        _upload(fed, "a", arrays, b"", cert["a"], trailer=trailer)


def test_the_site_refuses_a_receipt_for_other_bytes_or_another_site(signed, rng):
    fed, cert, key = signed
    arrays = _arrays(rng)
    spec = bundle_spec("f", "aa-igdp", arrays)
    site = SiteSigner("f", "a", key["a"], PROTO_HEADERS)
    answered = _upload(fed, "a", arrays, _upload_signature(key["a"], "a", arrays),
                       cert["a"]).receipt
    assert site.checked_receipt("upload", spec, answered) == answered
    with pytest.raises(IntegrityError, match=r"receipt .* for the upload of 'a' is not the one"):
        site.checked_receipt("upload", spec, receipt(spec, "b", PROTO_HEADERS.header_bytes))


@pytest.mark.parametrize(("signer", "cert_of", "refusal"), [
    ("b", "a", "the signature on the upload of 'a' does not verify"),
    ("b", "b", "signed as 'a' comes with the certificate of 'b'"),
    (None, "a", "the upload of 'a' is not signed by its kit key")])
def test_an_upload_signed_by_another_site_or_unsigned_is_refused_naming_the_site(
        signed, rng, signer, cert_of, refusal):
    fed, cert, key = signed
    arrays = _arrays(rng)
    signature = b"" if signer is None else _upload_signature(key[signer], "a", arrays)
    with pytest.raises(UnauthenticatedError, match=refusal):
        _upload(fed, "a", arrays, signature, cert[cert_of])
    assert fed.missing_uploads() == ["a", "b"]  # nothing stored


def test_an_upload_altered_after_it_was_signed_is_refused(signed, rng):
    fed, cert, key = signed
    arrays = _arrays(rng)
    signature = _upload_signature(key["a"], "a", arrays)
    altered = arrays | {"data": arrays["data"] + 1e-9}
    for trailer in (False, True):
        with pytest.raises(UnauthenticatedError, match="upload of 'a' does not verify"):
            _upload(fed, "a", altered, signature, cert["a"], trailer=trailer)
    assert fed.missing_uploads() == ["a", "b"]


def test_a_commitment_is_checked_against_its_site(signed):
    fed, cert, key = signed
    digest = bytes(range(32))
    good = sign(key["a"], commitment_statement("f", "a", digest))
    with pytest.raises(UnauthenticatedError, match="commitment of 'a' is not signed"):
        fed.publish_commitment("a", digest, b"", cert["a"])
    with pytest.raises(UnauthenticatedError, match="commitment of 'a' does not verify"):
        fed.publish_commitment("a", bytes(32), good, cert["a"])  # another digest
    with pytest.raises(UnauthenticatedError, match="certificate of 'b'"):
        fed.publish_commitment("a", digest, sign(key["b"], commitment_statement(
            "f", "a", digest)), cert["b"])
    assert fed.list_commitments() == []
    fed.publish_commitment("a", digest, good, cert["a"])
    assert [c.participant_id for c in fed.list_commitments()] == ["a"]


def test_a_site_model_request_is_checked_against_its_site(signed):
    fed, cert, key = signed
    with pytest.raises(UnauthenticatedError, match="site model request of 'b' is not signed"):
        fed.site_model("b", "", b"", cert["b"])
    with pytest.raises(UnauthenticatedError, match="site model request of 'b' does not verify"):
        fed.site_model("b", "", sign(key["a"], site_model_statement("f", "b", "")), cert["b"])
    # Signed, the request reaches the state check: nothing is uploaded yet.
    with pytest.raises(PreconditionError, match="not done"):
        fed.site_model("b", "", sign(key["b"], site_model_statement("f", "b", "")), cert["b"])
