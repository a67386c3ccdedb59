"""The analyst's state machine: :mod:`analyst.core.federation`, re-exported where its callers
(the gRPC service, the server, the kit, the tests) have always imported it. Which encoding it
keeps its store in is the store's (:class:`analyst.storage.Store` for the gRPC path).
"""

from __future__ import annotations

from noisyanchor.analyst.core.federation import (
    DISCLOSURE_DTYPES,
    FAILED_FILE,
    LOCK_WAIT,
    SCREENING_FILE,
    UPLOAD_DTYPES,
    WITHDRAWN_DIR,
    Committed,
    Federation,
)

__all__ = ["DISCLOSURE_DTYPES", "FAILED_FILE", "LOCK_WAIT", "SCREENING_FILE", "UPLOAD_DTYPES",
           "WITHDRAWN_DIR", "Committed", "Federation"]
