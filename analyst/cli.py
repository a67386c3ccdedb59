"""Subcommands of the analyst role."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this role's subcommands to the top-level parser."""
