"""noisyanchor protobuf packages."""
