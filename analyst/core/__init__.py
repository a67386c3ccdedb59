"""The analyst's side of the protocol, free of any transport (issue 32, item 2): no gRPC, no
generated code (``tests/packaging/test_core_transport_free.py`` checks the import graph).

A transport (the gRPC service :mod:`analyst.service`; a Flower ServerApp) authenticates the
caller, decodes its message into the plain values below, calls the core and encodes what comes
back; every refusal is a typed :class:`common.errors.NoisyAnchorError` subclass, which each
transport maps to its own way of saying no (:mod:`analyst.edge`: gRPC status codes).

Public API
----------
``Store(root, codec)`` (:mod:`.store`)
    The durable store (uploads, disclosures, relay objects, result); ``codec`` is a
    :class:`.codec.StoreCodec` (``common.wire_messages.PROTO_CODEC`` for every store so far;
    :class:`analyst.storage.Store` binds it). ``store.open(identity)`` takes it for one process.
``Federation(config, store)`` (:mod:`.federation`)
    The state machine (``collecting`` -> ``aligning`` -> ``done`` | ``failed``), thread-safe.
    Caller ids are the ones the transport authenticated (a kit certificate checked against the
    federation CA: ``fed.ca_pems``).

    - ``check_caller(pid, federation_id)``; ``describe() -> FederationInfo``;
      ``status(pid) -> dict`` (``withdrawn``: ``Withdrawal`` list); ``withdraw(pid, reason)``;
      ``rejoin(pid)``.
    - ``upload(pid, stream: BundleStream) -> Committed`` (receipt, ``already_committed``): the
      one upload; ``disclose(pid, stream)``: a colluder's disclosure.
    - relay: ``publish_key(pid, public_key, signature, bound_to, cert_pem)``,
      ``list_keys() -> [SignedKey]``, ``post_sealed(pid, [SealedShare], cert_pem)``,
      ``get_sealed(pid) -> SealedShare``, ``publish_commitment(pid, digest)``,
      ``list_commitments() -> [Commitment]``.
    - ``site_model(pid, asked="") -> bytes`` once ``done``; ``maybe_align()``, ``wait()``,
      ``close()``.
``common.bundles``
    ``BundleSpec``, ``BundleStream(spec, chunks, trailer)``, ``bundle_spec``, ``receipt``.
``common.protocol_messages``
    ``SignedKey``, ``SealedShare``, ``Commitment``, ``Withdrawal``, ``FederationInfo``.
"""
