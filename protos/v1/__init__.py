"""Version 1 of the analyst service contract.

Generated modules: ``python -m noisyanchor.protos.generate``.
"""
