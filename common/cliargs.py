"""Command-line value types shared by every role's subcommands.

A bad value given on the command line is a usage error: argparse reports it naming the option and
exits with status 2, before any work starts (a refused operation exits with 1). Each type applies
the engine's own validator (:mod:`common.validation`), so the command line and the library agree
on what is valid.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from noisyanchor.common.durations import check_seconds
from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.validation import check_count, check_nonnegative, check_positive


def _argtype(name: str, check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=`` that turns ``check``'s error into a usage error."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except (InvalidInputError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(f"expected a number, got {text!r}") from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(f"expected an integer, got {text!r}") from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An integer ``>= minimum``."""
    return _argtype(f"integer >= {minimum}",
                    lambda t: check_count(_integer(t), "value", minimum=minimum))


#: A finite number ``> 0``.
positive_float = _argtype("positive number", lambda t: check_positive(_number(t), "value"))
#: Seconds to wait or poll: ``> 0`` and at most :data:`common.durations.MAX_AHEAD`.
seconds = _argtype("seconds", lambda t: check_seconds(_number(t), "value"))
#: A finite number ``>= 0``.
nonnegative_float = _argtype("non-negative number",
                             lambda t: check_nonnegative(_number(t), "value"))


def _open_unit(text: str) -> float:
    value = _number(text)
    if not 0.0 < value < 1.0:
        raise InvalidInputError(f"value must be in (0, 1), got {value:g}")
    return value


#: A number strictly between 0 and 1 (e.g. delta).
open_unit_float = _argtype("number in (0, 1)", _open_unit)
