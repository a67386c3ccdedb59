"""The site's one upload and its site-model request, free of any transport (issue 32): the
statements it signs with its kit key, and the check of the analyst's answer.

The site signs its receipt (:func:`common.bundles.receipt`: its id and the header with every
array's SHA-256), so the analyst's core can check the upload against the federation CA whatever
carried it; and it computes that receipt itself, so an analyst's receipt for other bytes, or for
another site, is refused here (:func:`checked_receipt`). A transport streams the bundle (gRPC:
:meth:`participant.client.AnalystClient.send_bundle`).
"""

from __future__ import annotations

from dataclasses import dataclass

from noisyanchor.common.bundles import BundleSpec, HeaderCodec, receipt
from noisyanchor.common.errors import IntegrityError
from noisyanchor.common.signed_statements import bundle_statement, sign, site_model_statement


@dataclass(frozen=True)
class SiteSigner:
    """A site's statements about its bundles and requests, signed with its kit key.

    Attributes
    ----------
    federation_id, participant_id : str
    tls_key_pem : bytes
        The kit key (the private key of the site's TLS client certificate).
    codec : HeaderCodec
        The encoding of a bundle header its receipts hash (the analyst store's:
        :data:`common.wire.PROTO_HEADERS`).
    """

    federation_id: str
    participant_id: str
    tls_key_pem: bytes
    codec: HeaderCodec

    def receipt(self, spec: BundleSpec) -> bytes:
        """The receipt of this site's bundle ``spec`` (with every digest)."""
        return receipt(spec, self.participant_id, self.codec.header_bytes)

    def bundle_signature(self, kind: str, spec: BundleSpec) -> bytes:
        """The signature of this site's ``kind`` bundle ``spec`` (``upload``, ``disclosure``)."""
        return sign(self.tls_key_pem, bundle_statement(self.federation_id, self.participant_id,
                                                       kind, self.receipt(spec)))

    def site_model_signature(self, asked: str) -> bytes:
        """The signature of this site's request for the site model of ``asked`` (its own;
        empty: its own)."""
        return sign(self.tls_key_pem, site_model_statement(self.federation_id,
                                                           self.participant_id, asked))

    def checked_receipt(self, kind: str, spec: BundleSpec, answered: bytes) -> bytes:
        """``answered``, the analyst's receipt for this site's ``kind`` bundle ``spec``, once it
        is the one this site computes.

        Raises
        ------
        IntegrityError
            The analyst's receipt is for other bytes or another site (naming both digests).
        """
        own = self.receipt(spec)
        if answered != own:
            raise IntegrityError(f"the analyst's receipt {answered.hex()[:16]}... for the "
                                 f"{kind} of {self.participant_id!r} is not the one this site "
                                 f"computes ({own.hex()[:16]}...): it did not commit these "
                                 "bytes as this site's")
        return answered
