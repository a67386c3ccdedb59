"""The project's log handlers bound every record (common.logs)."""

import logging

from noisyanchor.common.logs import MAX_RECORD_BYTES, BoundedRecords


def test_a_record_longer_than_the_limit_is_cut_and_says_so():
    record = logging.LogRecord("noisyanchor.x", logging.WARNING, __file__, 1,
                               "refused: %s", ("\u00e9" * 1_000_000,), None)
    assert BoundedRecords().filter(record)
    message = record.getMessage()
    assert len(message.encode()) <= MAX_RECORD_BYTES + 60
    assert message.endswith(f"[... {2_000_000 + 9} bytes, cut to {MAX_RECORD_BYTES}]")
    short = logging.LogRecord("noisyanchor.x", logging.INFO, __file__, 1, "ok %d", (3,), None)
    assert BoundedRecords().filter(short) and short.getMessage() == "ok 3"
