"""Logging for long-running roles: INFO by default, optional JSON lines to a file, and gRPC's
C-core kept out of the operator's log.

The JSON formatter is python-json-logger's (one object per line with ``time``, ``level``,
``logger``, ``message`` and any ``extra=`` fields), so log shippers read it without parsing text.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from noisyanchor.common.text import cut_bytes

#: Fields of every JSON log line (python-json-logger's format string).
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"

#: Text format of the console log.
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"

#: Longest message of one log record (bytes of UTF-8), in every handler the project sets up:
#: whatever a peer manages to get into a message, one record cannot fill the disk.
MAX_RECORD_BYTES = 4096


class BoundedRecords(logging.Filter):
    """Cuts a record's message to :data:`MAX_RECORD_BYTES` (saying how much was cut) before
    any formatter sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > MAX_RECORD_BYTES // 4:  # only then can it be over the byte limit
            size = len(message.encode("utf-8", "surrogatepass"))
            if size > MAX_RECORD_BYTES:
                record.msg = (f"{cut_bytes(message, MAX_RECORD_BYTES)} [... {size} bytes, cut "
                              f"to {MAX_RECORD_BYTES}]")
                record.args = None
        return True


def quiet_grpc_core() -> None:
    """Keep gRPC's C-core from writing its own lines (handshake errors, absl warnings) to stderr.

    Must run before ``grpc`` is imported: the core reads ``GRPC_VERBOSITY`` when it starts. An
    operator who sets the variable keeps their value (e.g. ``GRPC_VERBOSITY=debug`` with
    ``GRPC_TRACE`` to debug the transport).
    """
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    os.environ.setdefault("GLOG_minloglevel", "3")  # absl's "before InitializeLog" warning


def configure_logging(json_file: Path | None = None) -> None:
    """INFO for the project's loggers on the console (DEBUG when the command line asked for it:
    ``-vv`` sets the root logger to DEBUG), and every such record as a JSON line appended to
    ``json_file`` when given (created mode 0600, its folder made)."""
    root = logging.getLogger()
    level = logging.DEBUG if root.level and root.level <= logging.DEBUG else logging.INFO
    project = logging.getLogger("noisyanchor")
    project.setLevel(level)
    if not root.handlers:
        logging.basicConfig(format=TEXT_FORMAT)
    for handler in root.handlers:  # the CLI's console handler lets project records through
        handler.setLevel(min(handler.level or level, level))
        _bound(handler)
    if json_file is not None:
        from pythonjsonlogger.json import JsonFormatter

        path = Path(json_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(JsonFormatter(JSON_FIELDS, rename_fields={
            "asctime": "time", "levelname": "level", "name": "logger"}))
        handler.setLevel(level)
        _bound(handler)
        project.addHandler(handler)


def _bound(handler: logging.Handler) -> None:
    """Give ``handler`` the record length limit (once)."""
    if not any(isinstance(f, BoundedRecords) for f in handler.filters):
        handler.addFilter(BoundedRecords())
