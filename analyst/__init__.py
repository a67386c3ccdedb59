"""analyst role of noisyanchor."""
