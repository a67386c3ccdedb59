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
included) become one space; the result is cut to ``limit`` characters.
"""

from __future__ import annotations

import unicodedata

#: Longest piece of peer text kept (characters), e.g. a withdrawal reason.
MAX_PEER_TEXT = 2000

#: Unicode general categories removed from peer text.
REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})


def peer_text(text: str, limit: int, *, empty: str = "") -> str:
    """``text`` by the rule of the module docstring; ``empty`` when nothing is left."""
    kept = "".join(ch if unicodedata.category(ch) not in REMOVED_CATEGORIES else
                   (" " if ch in "\t\n\r\v\f\x1c\x1d\x1e\x1f\x85" else "") for ch in str(text))
    return " ".join(kept.split())[:limit] or empty
