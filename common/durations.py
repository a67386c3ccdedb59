"""Durations and deadlines as people write and read them.

* :func:`human_duration` turns seconds into the two largest units ("60 days 19 h", "4 min 5 s")
  for every message that names a wait, a deadline or an expiry.
* :func:`parse_deadline` reads a deadline as a project file, a config or the command line gives
  it: an absolute date-time with a UTC offset (a TOML date-time or its ISO 8601 text), or a time
  relative to now ("in 7 days", "in 1 week 2 days", "in 36 hours"), resolved once, when read.

Hand-written rather than taken from a library (``humanize``, ``dateparser``): the forms accepted
are few and fixed, and a new core dependency for them would weigh more than these lines.
"""

from __future__ import annotations

import datetime as dt
import re

from noisyanchor.common.errors import InvalidInputError

#: Seconds of each unit a relative time may use (singular, plural and short forms).
UNIT_SECONDS = {"week": 604800, "day": 86400, "hour": 3600, "minute": 60, "second": 1}
_UNIT_NAMES = {"w": "week", "weeks": "week", "d": "day", "days": "day", "h": "hour",
               "hours": "hour", "hr": "hour", "hrs": "hour", "min": "minute", "mins": "minute",
               "minutes": "minute", "m": "minute", "s": "second", "sec": "second",
               "secs": "second", "seconds": "second", **{u: u for u in UNIT_SECONDS}}
_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")

#: Longest span a duration or a deadline may reach from now: a federation waits for days or
#: weeks, and its certificates are issued for about a year (``[project] validity_days``), so a
#: deadline further away is a typo ("in 99999999999 days", "9999-12-31").
MAX_AHEAD = dt.timedelta(days=731)

#: The units :func:`human_duration` writes, largest first.
_SHOWN = (("day", 86400), ("h", 3600), ("min", 60), ("s", 1))


def human_duration(seconds: float) -> str:
    """``seconds`` in its two largest units, rounded to the smaller of them: ``5253678`` ->
    ``"60 days 19 h"``, ``245`` -> ``"4 min 5 s"``, ``604799.6`` -> ``"7 days"``; below 10 s
    to the tenth (``0.42`` -> ``"0.4 s"``); a negative span is written as its size."""
    size = abs(seconds)
    largest = next((i for i, (_, unit) in enumerate(_SHOWN) if size >= unit), len(_SHOWN) - 1)
    step = _SHOWN[min(largest + 1, len(_SHOWN) - 1)][1]
    left = round(size / step) * step
    parts: list[tuple[int, str]] = []
    for name, unit in _SHOWN:
        count, left = divmod(left, unit)
        if count or parts:
            parts.append((count, name))
        if len(parts) == 2:
            break
    if size < 10:  # a few seconds: to the tenth, so that short steps do not all read "0 s"
        return f"{round(size, 1):g} s"
    shown = [f"{n} {name}{'s' if name == 'day' and n != 1 else ''}" for n, name in parts if n]
    return " ".join(shown)


def check_seconds(value: float, what: str) -> float:
    """``value`` if it is a finite number of seconds in ``(0, MAX_AHEAD]``: every wait, timeout
    and span a config key or a flag gives goes through here, so none can overflow a clock or a
    timer (``threading`` refuses waits past about 292 years with ``OverflowError``)."""
    if not 0.0 < value <= MAX_AHEAD.total_seconds():  # nan and inf too
        raise InvalidInputError(
            f"{what} must be a number of seconds > 0 and at most "
            f"{MAX_AHEAD.total_seconds():.0f} ({MAX_AHEAD.days} days), got {value:g}")
    return float(value)


def check_days(value: int, what: str) -> int:
    """``value`` if it is a whole number of days from 1 to ``MAX_AHEAD.days`` (a validity)."""
    if not 1 <= value <= MAX_AHEAD.days:
        raise InvalidInputError(f"{what} must be 1 to {MAX_AHEAD.days} days, got {value}")
    return value


def parse_duration(text: str) -> dt.timedelta:
    """A span such as ``"7 days"``, ``"1 week 2 days"``, ``"36 h"`` or ``"90 min"``, at most
    :data:`MAX_AHEAD`."""
    if len(text) > 200:
        raise InvalidInputError(f"a duration of {len(text)} characters: write e.g. '7 days'")
    rest, total, terms = text.strip().lower(), 0.0, 0
    while rest:
        match = _TERM.match(rest)
        unit = _UNIT_NAMES.get(match.group(2)) if match else None
        if match is None or unit is None:
            raise InvalidInputError(
                f"{text!r} is not a duration: write a number and a unit, e.g. '7 days', "
                f"'1 week 2 days', '36 hours' (units: {', '.join(UNIT_SECONDS)})")
        total += float(match.group(1)) * UNIT_SECONDS[unit]
        rest, terms = rest[match.end():].lstrip(", "), terms + 1
    if not terms:
        raise InvalidInputError("an empty duration: write e.g. '7 days'")
    if not total <= MAX_AHEAD.total_seconds():  # inf and nan too
        raise InvalidInputError(f"{text[:60]!r} is longer than {MAX_AHEAD.days} days, the "
                                "longest a federation's deadline may be from now")
    return dt.timedelta(seconds=total)


#: How a deadline relative to the moment it is read begins ("in 7 days").
RELATIVE = "in "


def is_relative(value: object) -> bool:
    """Whether ``value`` is a deadline relative to now (``"in <duration>"``)."""
    return isinstance(value, str) and value.strip().lower().startswith(RELATIVE)


def parse_deadline(value: object, now: dt.datetime | None = None) -> dt.datetime:
    """The absolute, timezone-aware deadline ``value`` stands for, to the second.

    ``value`` is a timezone-aware :class:`datetime.datetime` (a TOML offset date-time), an ISO
    8601 date-time text with an offset (``"2027-01-31T18:00:00Z"``), or ``"in <duration>"``
    (:func:`parse_duration`) counted from ``now`` (default: the current UTC time); never more
    than :data:`MAX_AHEAD` after ``now``.
    """
    now = now or dt.datetime.now(dt.UTC)
    if isinstance(value, str):
        text = value.strip()
        if is_relative(text):  # to the next whole second: never earlier than asked
            when = now + parse_duration(text[len(RELATIVE):])
            return when.replace(microsecond=0) + dt.timedelta(seconds=when.microsecond > 0)
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInputError(
                f"{text!r} is not a deadline: write a date-time with a UTC offset "
                "(2027-01-31T18:00:00Z) or a time from now ('in 7 days', 'in 36 hours')") \
                from None
    if not isinstance(value, dt.datetime):
        raise InvalidInputError(f"a deadline is a date-time or 'in <duration>', got {value!r}")
    if value.tzinfo is None:
        raise InvalidInputError(f"the deadline {value.isoformat()} has no UTC offset; write it "
                                f"as {value.isoformat()}Z (UTC) or with +hh:mm")
    if value - now > MAX_AHEAD:
        raise InvalidInputError(f"the deadline {value.isoformat()} is more than "
                                f"{MAX_AHEAD.days} days away, longer than a federation can use "
                                "(its certificates expire first): write a nearer one")
    return value


def human_time(when: dt.datetime, now: dt.datetime | None = None) -> str:
    """``when`` in UTC with how far it is from now: ``"2027-01-31 18:00:00 UTC (in 60 days
    19 h)"`` or ``"... (3 h 5 min ago)"``."""
    now = now or dt.datetime.now(dt.UTC)
    span = (when - now).total_seconds()
    shown = when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    relative = f"in {human_duration(span)}" if span >= 0 else f"{human_duration(span)} ago"
    return f"{shown} ({relative})"
