"""noisyanchor: one-shot privacy-preserving collaborative learning with noisy-anchor GDP."""

__version__ = "0.1.0"
