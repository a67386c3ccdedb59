"""Version 1 of the analyst service contract (generated modules: python -m protos.generate)."""
