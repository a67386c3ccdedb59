"""Durations people read and deadlines people write (common/durations.py)."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from noisyanchor.common import cliargs
from noisyanchor.common.durations import (
    MAX_AHEAD,
    check_seconds,
    human_duration,
    human_time,
    is_relative,
    parse_deadline,
    parse_duration,
)
from noisyanchor.common.errors import InvalidInputError

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, 250000, tzinfo=dt.UTC)


@pytest.mark.parametrize("seconds, text", [
    (5253678, "60 days 19 h"),  # the "waiting at most 5253678 s"
    (245, "4 min 5 s"), (0.42, "0.4 s"), (0, "0 s"), (9.96, "10 s"), (59, "59 s"),
    (59.6, "1 min"),
    (3600, "1 h"), (7230, "2 h"), (90061, "1 day 1 h"), (86399, "1 day"),
    (604799.6, "7 days"), (-130, "2 min 10 s"),
])
def test_human_duration_names_the_two_largest_units(seconds, text):
    assert human_duration(seconds) == text


@pytest.mark.parametrize("text, seconds", [
    ("7 days", 7 * 86400), ("1 week 2 days", 9 * 86400), ("36h", 36 * 3600),
    ("90 min, 5 s", 5405), ("1.5 hours", 5400), ("2 Weeks", 14 * 86400),
])
def test_durations_in_words_and_short_units(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["seven days", "7", "7 fortnights", "", "-1 days"])
def test_a_duration_without_number_or_known_unit_is_refused(text):
    with pytest.raises(InvalidInputError, match="duration"):
        parse_duration(text)


def test_relative_deadlines_count_from_now_to_the_next_whole_second():
    assert parse_deadline("in 7 days", NOW) == dt.datetime(2026, 12, 8, 12, 0, 1, tzinfo=dt.UTC)
    assert parse_deadline("  IN 36 hours", NOW) == dt.datetime(2026, 12, 3, 0, 0, 1,
                                                                tzinfo=dt.UTC)
    assert is_relative("in 1 h") and not is_relative("2027-01-31T18:00:00Z")
    assert not is_relative(dt.datetime(2027, 1, 31, tzinfo=dt.UTC))


def test_absolute_deadlines_need_an_offset():
    fixed = dt.datetime(2027, 1, 31, 18, tzinfo=dt.UTC)
    assert parse_deadline(fixed, NOW) == fixed
    assert parse_deadline("2027-01-31T18:00:00Z", NOW) == fixed
    assert parse_deadline("2027-01-31T19:00:00+01:00", NOW) == fixed
    with pytest.raises(InvalidInputError, match="no UTC offset"):
        parse_deadline("2027-01-31T18:00:00", NOW)
    with pytest.raises(InvalidInputError, match="not a deadline"):
        parse_deadline("next friday", NOW)
    with pytest.raises(InvalidInputError, match="date-time or 'in <duration>'"):
        parse_deadline(7, NOW)


def test_human_time_says_when_and_how_far():
    assert human_time(NOW + dt.timedelta(days=60, hours=19), NOW) == \
        "2027-01-31 07:00:00 UTC (in 60 days 19 h)"
    assert human_time(NOW - dt.timedelta(minutes=3), NOW).endswith("(3 min ago)")


@pytest.mark.parametrize("when, match", [
    ("in 99999999999 days", "longer than 731 days"),
    ("in 1" + "0" * 190 + " weeks", "longer than 731 days"),  # inf seconds
    ("in 800 days", "longer than 731 days"), ("9999-12-31T00:00:00Z", "more than 731 days"),
    ("in " + "1 day " * 100, "a duration of"),
])
def test_deadlines_are_bounded_to_what_a_federation_can_use(when, match):
    with pytest.raises(InvalidInputError, match=match):
        parse_deadline(when, NOW)
    assert parse_deadline("in 730 days", NOW) - NOW < MAX_AHEAD


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), 1e300,
                                   MAX_AHEAD.total_seconds() + 1])
def test_every_span_in_seconds_is_bounded_like_a_deadline(value):
    with pytest.raises(InvalidInputError, match="at most 63158400"):
        check_seconds(value, "--timeout")
    assert check_seconds(MAX_AHEAD.total_seconds(), "--timeout") == MAX_AHEAD.total_seconds()


def test_the_command_line_seconds_type_is_the_same_bound():
    with pytest.raises(argparse.ArgumentTypeError, match="731 days"):
        cliargs.seconds("1e300")
    assert cliargs.seconds("2.5") == 2.5
