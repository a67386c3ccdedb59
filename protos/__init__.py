"""Wire contract (protobuf) of the analyst service."""
