"""Wire contract (protobuf) of the analyst service, versioned by package (``noisyanchor.v1``).

The generated ``*_pb2.py`` and ``*_pb2_grpc.py`` modules are checked in; regenerate them after
editing a ``.proto`` file with ``python -m noisyanchor.protos.generate`` (needs the ``dev``
extra, whose exact ``grpcio-tools`` pin makes the output reproducible byte for byte). A test fails
when they are stale. The folder installs as ``noisyanchor.protos``.
"""
