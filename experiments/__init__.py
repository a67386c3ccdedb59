"""experiments role of noisyanchor."""
