"""Text that comes from peers, made safe to store, log, print and relay.

A peer (a participant, or the analyst relaying another participant's words) may send free text,
such as a withdrawal reason. Shown as is, terminal escape sequences in it would rewrite the
operator's screen or log view, a right-to-left override (U+202E) or other invisible format
characters would make it read as something else, and line breaks would forge log lines. Every
piece of peer text goes through :func:`peer_text` where it enters (before it is stored, logged or
relayed) and again where a receiver shows it.

The rule: every character of Unicode general category Cc (control: C0, DEL, C1, so ESC and
with it every escape sequence's introducer) or Cf (format: bidirectional overrides and
isolates, zero-width characters, the byte-order mark, ...) is removed, and so are lone
surrogates (Cs, which no encoding can write); runs of whitespace (line and paragraph separators
included) become one space; the result is cut to ``limit`` characters. Before any of that, the
text is cut to ``4 * limit`` bytes of UTF-8 (:func:`cut_bytes`, which reads no further), so the
cost of a piece of peer text is bounded by the limit, not by what the peer sent.
"""

from __future__ import annotations

import unicodedata

#: Longest piece of peer text kept (characters), e.g. a withdrawal reason.
MAX_PEER_TEXT = 2000

#: Unicode general categories removed from peer text.
REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})


def cut_bytes(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 takes at most ``max_bytes`` bytes (a character
    cut in two is dropped, and so are lone surrogates); reads at most ``max_bytes`` characters
    of ``text``, whatever its length."""
    raw = str(text)[:max_bytes].encode("utf-8", "surrogatepass")[:max_bytes]
    return raw.decode("utf-8", "ignore")


def peer_text(text: str, limit: int, *, empty: str = "") -> str:
    """``text`` by the rule of the module docstring; ``empty`` when nothing is left."""
    head = cut_bytes(text, 4 * limit)  # a character is at most 4 bytes: limit of them fit
    kept = "".join(ch if unicodedata.category(ch) not in REMOVED_CATEGORIES else
                   (" " if ch in "\t\n\r\v\f\x1c\x1d\x1e\x1f\x85" else "") for ch in head)
    return " ".join(kept.split())[:limit] or empty


#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP, "CSV
#: Injection"): = + - @, tab and carriage return; also their full-width forms, which some
#: spreadsheets fold to them.
FORMULA_STARTS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")


def inert_cell(text: str) -> str:
    """A CSV cell no spreadsheet runs: ``text`` with a leading ``'`` when it starts like a
    formula (:data:`FORMULA_STARTS`), unless it is a number (``-1.5`` stays as it is)."""
    if not text or text[0] not in FORMULA_STARTS:
        return text
    try:
        float(text)
    except ValueError:
        return "'" + text
    return text
