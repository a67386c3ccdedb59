"""deploy role of noisyanchor."""
