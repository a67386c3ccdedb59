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
``join.join(cfg, info, early=None)``
    This site's records read with the schema of the declaration ``info``
    (:class:`common.protocol_messages.FederationInfo`) and checked against it
    (``check_member``, ``served_schema``, ``check_fits_federation``), as a
    :class:`join.Joined`; refused, an :class:`common.errors.InvalidInputError` the transport
    reports as the site's withdrawal. ``join.keep_schema(cfg, info, codec)`` keeps the schema
    (``codec``: a :class:`join.SchemaCodec`).
``upload.plan_upload(cfg, joined, seeds)`` then ``upload.compute_site_upload(plan, seed)``
    The one upload in two steps around the anchor agreement (``plan.params`` is what the seed
    is bound to): an :class:`upload.UploadPlan` (secret generator, split tags, projection
    cost), then an :class:`upload.SiteUpload` (arrays, bundle spec, the key kept once it
    commits); ``upload.site_seeds(cfg)`` the seeds an interrupted run repeats,
    ``upload.keep_secrets(plan, made)`` a colluder's secrets, ``upload.own_site_model(cfg,
    site, where)`` refuses another site's model.
``upload.SiteSigner(federation_id, participant_id, tls_key_pem, codec)``
    The site's signed statements: ``bundle_signature(kind, spec)`` (over its receipt, the
    analyst's core checks it), ``site_model_signature(asked)``, ``receipt(spec)``, and
    ``checked_receipt(kind, spec, answered)``, which refuses an analyst's receipt for other bytes
    or another site (:class:`common.errors.IntegrityError`). The commitment is signed by the
    agreement itself (``PublishCommitment.signature``).

The gRPC drivers are :func:`participant.run.run_upload`, :func:`participant.anchor.agree_on_seed`
and :class:`participant.client.AnalystClient` (``send_bundle``, ``fetch_site_model``); the
Flower driver is :mod:`participant.flower_client`.
"""
