"""participant role of noisyanchor."""
