"""Peer text (common.text): no control or format character survives, words stay apart."""

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from noisyanchor.common.text import (
    MAX_PEER_TEXT,
    REMOVED_CATEGORIES,
    cut_bytes,
    inert_cell,
    peer_text,
)


def test_escape_sequences_overrides_and_line_breaks_are_removed():
    hostile = ("ok\x1b[2J\x1b]0;owned\x07 fake\u202elog\u2066x\u2069\u200b line\nINFO "
               "forged\r\n\x85\u2028end\ufeff\x00\x9b31m")
    assert peer_text(hostile, 200) == "ok[2J]0;owned fakelogx line INFO forged end31m"


def test_limit_and_empty():
    assert peer_text("a" * 5000, MAX_PEER_TEXT) == "a" * MAX_PEER_TEXT
    assert peer_text("\x1b\u202e  \n", 10, empty="no reason given") == "no reason given"


@given(st.text(max_size=300))
def test_no_removed_category_survives_and_the_rest_is_kept_in_order(text):
    out = peer_text(text, 10_000)
    assert not any(unicodedata.category(ch) in REMOVED_CATEGORIES for ch in out)
    assert out == out.strip() and "  " not in out
    kept = [ch for ch in text if unicodedata.category(ch) not in REMOVED_CATEGORIES
            and not ch.isspace()]
    assert [ch for ch in out if not ch.isspace()] == kept


@given(st.text(max_size=200), st.integers(0, 300))
def test_cut_bytes_is_the_longest_prefix_within_the_byte_limit(text, max_bytes):
    out = cut_bytes(text, max_bytes)
    assert text.startswith(out) or any(unicodedata.category(ch) == "Cs" for ch in text)
    assert len(out.encode("utf-8", "surrogatepass")) <= max_bytes
    if out == text[:len(out)] and len(out) < len(text):  # the next character did not fit
        assert len(text[:len(out) + 1].encode("utf-8", "surrogatepass")) > max_bytes \
            or unicodedata.category(text[len(out)]) == "Cs"


def test_peer_text_reads_a_bounded_prefix_of_what_a_peer_sent():
    # Characters past 4 * limit bytes are never looked at: a 4-million character reason costs
    # what a short one does (issue 30: each code point used to be inspected before the cut).
    assert peer_text("\u00e9" * 4_000_000, 10) == "\u00e9" * 10
    assert peer_text("\x1b" * 4_000_000 + "late", 10, empty="-") == "-"


def test_csv_cells_that_start_like_a_formula_are_made_inert():
    for formula in ("=HYPERLINK(\"http://x\",\"y\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)",
                    "\t=1", "\r=1", "\uff1d1+1"):
        assert inert_cell(formula) == "'" + formula
    for kept in ("cat", "", "-1.5", "+3", "1e-3", "-inf", "a=b"):
        assert inert_cell(kept) == kept
