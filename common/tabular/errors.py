"""Errors of a table that locate the problem: file, line, column and value.

A site's data engineer must find the cell to fix; the other sites of a federation must learn
which site withdrew and why, but never a local path or a private record's value. One error
carries both: ``str(err)`` is the local message (with the value), :meth:`TableError.public`
the withdrawal reason (without it).
"""

from __future__ import annotations

from pathlib import PurePath

from noisyanchor.common.errors import InvalidInputError

#: Longest cell value quoted in a local message (characters); longer values are cut.
MAX_QUOTED = 60


def quote(value: str) -> str:
    """``value`` quoted for a message, cut to :data:`MAX_QUOTED` characters."""
    text = value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "..."
    return repr(text)


class TableError(InvalidInputError):
    """A header, row or cell of a table that cannot be used, with where it is.

    Parameters
    ----------
    file : str
        The file as the local message shows it (:meth:`public` keeps its name only).
    problem : str
        What is wrong, phrased so that ``{value}`` stands for the cell, e.g.
        ``"{value} is not a number"``; without ``{value}`` the value is not quoted.
    line : int, optional
        1-based line of the file (the header is line 1 of a CSV file).
    column : str, optional
        The column's name (or ``field 3`` where the header names none).
    value : str, optional
        The offending cell, quoted locally and replaced by "the value" in :meth:`public`.
    hint : str
        What to do about it (public: must hold no record value).
    detail : str
        Local only, after the hint: what the site's own file holds (e.g. its header's other
        column names), which is none of the other sites' business.
    """

    def __init__(self, file: str, problem: str, *, line: int | None = None,
                 column: str | None = None, value: str | None = None, hint: str = "",
                 detail: str = "") -> None:
        self.file, self.problem, self.line, self.column = file, problem, line, column
        self.value, self.hint, self.detail = value, hint, detail
        text = self._render(quote(value) if value is not None else "the value", file)
        super().__init__(text + (f"; {detail}" if detail else ""))

    def _where(self, file: str) -> str:
        parts = [file]
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.column is not None:
            parts.append(f"column {self.column!r}")
        return ", ".join(parts)

    def _render(self, value: str, file: str) -> str:
        problem = self.problem.replace("{value}", value)
        return f"{self._where(file)}: {problem}" + (f"; {self.hint}" if self.hint else "")

    def public(self) -> str:
        """The message without the cell's value (it belongs to a private record) and with the
        file's name only (its folder is the site's own business)."""
        return self._render("the value", PurePath(self.file).name or self.file)
