"""The site's side of the protocol, free of any transport (issue 32, item 2): no gRPC, no
generated code (``tests/packaging/test_core_transport_free.py`` checks the import graph).

Public API
----------
``agreement.SeedAgreement(federation_id=, participant_id=, dealer=, expected=, exchange_key=,
tls_key_pem=, ca_pem=, params=SharedParameters(method, anchors, dim, translation_scale),
codec=, dealer_seed=None)``
    The anchor agreement as a sans-I/O state machine: ``start()`` returns the first action,
    ``receive(reply)`` the next one, until :class:`agreement.Agreed` ``(seed)``. Actions:
    ``ListKeys(wanted)``, ``PublishKey(public_key, bound_to, signature)``,
    ``FetchShare(wait)``, ``PostShares(shares)``, ``PublishCommitment(digest)``,
    ``ListCommitments(expected)``; replies are the dataclasses of
    :mod:`common.protocol_messages` (lists for the listing actions, ``None`` for a stored
    publication). A refused reply raises the typed error that names the site
    (:class:`common.errors.UnauthenticatedError`, :class:`~common.errors.IntegrityError`); a
    reply the state does not take raises :class:`agreement.ProtocolStateError`. ``codec`` is a
    :class:`agreement.SecretCodec` (``common.wire_messages.PROTO_CODEC``).
``upload.SiteSigner(federation_id, participant_id, tls_key_pem, codec)``
    The site's signed statements: ``bundle_signature(kind, spec)`` (over its receipt, the
    analyst's core checks it), ``site_model_signature(asked)``, ``receipt(spec)``, and
    ``checked_receipt(kind, spec, answered)``, which refuses an analyst's receipt for other bytes
    or another site (:class:`common.errors.IntegrityError`). The commitment is signed by the
    agreement itself (``PublishCommitment.signature``).

The gRPC drivers are :func:`participant.anchor.agree_on_seed` and
:class:`participant.client.AnalystClient` (``send_bundle``, ``fetch_site_model``).
"""
