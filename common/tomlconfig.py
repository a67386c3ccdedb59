"""Typed reading of TOML configuration files with errors that name the file, table and key.

Each role's config module reads its tables through :class:`Table`, then calls
:meth:`Table.done` so a misspelt key is an error instead of being silently ignored. Relative
paths resolve against the config file's folder, so a config directory can be moved whole.

Values are checked at load by the same validators the engine applies later (``check=``, or
:meth:`Table.checked` for checks across keys): a value the engine would refuse after the anchor
agreement or after every upload is refused when the config is read, naming the key.
"""

from __future__ import annotations

import builtins  # Table's readers are named str, int, float, bool: annotations need builtins
import datetime as dt
import re
import tomllib
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noisyanchor.common.durations import check_seconds, parse_deadline
from noisyanchor.common.errors import ConfigError, InvalidInputError
from noisyanchor.common.files import check_private_key

_MISSING = object()

#: Participant and federation ids: they name files and certificates.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_id(value: str, what: str) -> str:
    """``value`` if it is a valid id (letters, digits, ``._-``, at most 64 characters)."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise ConfigError(f"{what} {value!r} must be 1-64 letters, digits, '.', '_' or '-', "
                          "starting with a letter or digit")
    return value


def id_key(value: str) -> str:
    """What makes two ids the same name: equal after Unicode NFKC and case folding, so that
    ``Org-A`` and ``org-a`` (two folders on Linux, one on macOS and Windows, the same name to a
    person) cannot both be sites."""
    return unicodedata.normalize("NFKC", value).casefold()


def check_distinct_ids(ids: Sequence[str], what: str) -> None:
    """Refuse two of ``ids`` that are the same name by :func:`id_key`, naming both."""
    seen: dict[str, str] = {}
    for value in ids:
        key = id_key(value)
        if key in seen:
            raise ConfigError(f"{what}: {seen[key]!r} and {value!r} are the same name (ids "
                              "are compared ignoring case and Unicode compatibility forms)")
        seen[key] = value


#: Largest project or config file read (bytes): a schema of the most columns a schema may
#: declare, each with its most categories, fits many times over; a larger file is refused
#: before it is parsed.
MAX_CONFIG_BYTES = 32 << 20


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning a missing file, one over :data:`MAX_CONFIG_BYTES` or a
    syntax error into a ConfigError."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB, more than a config "
                          "file may hold; not read")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") \
            from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


class Table:
    """One ``[table]`` of a config file, read key by key with type checks."""

    def __init__(self, doc: dict[str, Any], name: str, path: Path, *, required: bool = True):
        value = doc.get(name, _MISSING)
        if value is _MISSING:
            if required:
                raise ConfigError(f"{path}: missing table [{name}]")
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: [{name}] must be a table")
        self.name, self.file, self._data = name, Path(path), dict(value)
        self._used: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.file}: [{self.name}] {key}"

    def _get(self, key: str, default: Any, kinds: tuple[type, ...], what: str) -> Any:
        self._used.add(key)
        if key not in self._data:
            if default is _MISSING:
                raise ConfigError(f"{self._where(key)} is required ({what})")
            return default
        value = self._data[key]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise ConfigError(f"{self._where(key)} must be {what}, got {value!r}")
        return value

    def value(self, key: builtins.str, default: Any, kinds: tuple[type, ...],
              what: builtins.str) -> Any:
        """A value of one of ``kinds`` (``what`` describes them in the error)."""
        return self._get(key, default, kinds, what)

    def checked(self, key: str, value: Any, check: Callable[[Any], Any] | None) -> Any:
        """``check(value)`` (an engine validator; its result is the value) with an
        :class:`InvalidInputError` turned into a ConfigError naming this table's ``key``.
        ``None`` values (an unset optional key) and ``check=None`` pass through."""
        if value is None or check is None:
            return value
        try:
            return check(value)
        except InvalidInputError as err:
            raise self.error(key, str(err)) from None

    def str(self, key: builtins.str, default: Any = _MISSING, *,
            check: Callable[[builtins.str], Any] | None = None) -> Any:
        """A string value."""
        return self.checked(key, self._get(key, default, (str,), "a string"), check)

    def int(self, key: builtins.str, default: Any = _MISSING, *,
            minimum: builtins.int | None = None,
            check: Callable[[builtins.int], Any] | None = None) -> Any:
        """An integer value, optionally bounded below."""
        value = self._get(key, default, (int,), "an integer")
        if value is not None and minimum is not None and value < minimum:
            raise ConfigError(f"{self._where(key)} must be >= {minimum}, got {value}")
        return self.checked(key, value, check)

    def float(self, key: builtins.str, default: Any = _MISSING, *,
              minimum: builtins.float | None = None,
              check: Callable[[builtins.float], Any] | None = None) -> Any:
        """A finite number (int or float) as float, optionally bounded below."""
        value = self._get(key, default, (int, float), "a number")
        if value is None:
            return None
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{self._where(key)} must be a finite number, got {value}")
        if minimum is not None and not value >= minimum:
            raise ConfigError(f"{self._where(key)} must be >= {minimum}, got {value}")
        return self.checked(key, float(value), check)

    def positive_float(self, key: builtins.str, default: Any = _MISSING, *,
                       check: Callable[[builtins.float], Any] | None = None) -> Any:
        """A finite number ``> 0`` as float."""
        value = self.float(key, default, minimum=0.0)
        if value is not None and not value > 0.0:
            raise self.error(key, f"must be a finite number > 0, got {value}")
        return self.checked(key, value, check)

    def bool(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A boolean value."""
        return self._get(key, default, (bool,), "true or false")

    def seconds(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A span in seconds, finite, ``> 0`` and at most
        :data:`common.durations.MAX_AHEAD` (:func:`common.durations.check_seconds`)."""
        return self.float(key, default, check=lambda s: check_seconds(s, "the value"))

    def datetime(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A TOML offset date-time (``2026-12-01T18:00:00Z``), timezone-aware, at most
        :data:`common.durations.MAX_AHEAD` from now (:func:`common.durations.parse_deadline`:
        ``9999-12-31`` is a typo, not a deadline)."""
        value = self._get(key, default, (dt.datetime,),
                          "a date-time with a UTC offset, e.g. 2026-12-01T18:00:00Z")
        if isinstance(value, dt.datetime):
            self.checked(key, value, parse_deadline)
        return value

    def strs(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A list of strings."""
        value = self._get(key, default, (list,), "a list of strings")
        if value is not None and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self._where(key)} must be a list of strings, got {value!r}")
        return value

    def path(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """A path; relative paths resolve against the config file's folder."""
        value = self.str(key, default)
        if value is None or isinstance(value, Path):
            return value
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.file.parent / p).resolve()

    def error(self, key: builtins.str, message: builtins.str) -> ConfigError:
        """A ConfigError naming this table's ``key``."""
        return ConfigError(f"{self._where(key)}: {message}")

    def done(self) -> None:
        """Refuse keys that no reader asked for (misspellings)."""
        unknown = sorted(set(self._data) - self._used)
        if unknown:
            raise ConfigError(f"{self.file}: [{self.name}] has unknown key(s) "
                              f"{', '.join(unknown)}")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one TLS endpoint: the CA to trust, own certificate and private key."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def read(cls, table: Table) -> TlsFiles:
        """From a ``[tls]`` table, checking the files exist."""
        files = cls(table.path("ca"), table.path("cert"), table.path("key"))
        for key in ("ca", "cert", "key"):
            if not getattr(files, key).is_file():
                raise table.error(key, f"file {getattr(files, key)} does not exist")
        check_private_key(files.key, f"[{table.name}] key (a TLS private key)")
        table.done()
        return files
