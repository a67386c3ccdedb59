"""DP releases as paid-once jobs: charged once per request id, computed once, kept.

A release request carries a client-chosen request id. The first request with an id charges the
privacy ledger (:mod:`analyst.privacy_budget`, whose rows carry the id), computes the release and
stores it under the caller's id; every later request with the same id and the same parameters
gets the stored output back at no charge (post-processing of one release). A request reusing an
id for different parameters is refused. Gram releases are computed by a bounded pool of worker
threads, not by the RPC that asked, so a client that disconnects loses nothing: the computation
finishes (it is paid) and the output waits to be fetched. Two requests with one id, even
concurrent, never start two computations: one lock guards the index of jobs, and a request that
finds its job still computing waits for it (score vectors) or reports its progress (Gram).

Layout under the store (every file written atomically, mode 0600)::

    releases/<participant>/<request_id>/request.json   what was asked (kind and parameters)
                                        charged.json   written once it is charged
                                        query.npy      a score query's record (to recompute)
                                        reply.pb       a score release (ScoreRelease)
                                        gram.npy       a Gram release, then
                                        header.pb      its GramHeader (written last: done)

Crash safety: ``request.json`` is written before the ledger is charged, the ledger row is the
commit point, ``charged.json`` and the output after it. At start-up a job folder whose id the
ledger does not know and that holds neither mark nor output was never charged and is removed;
one that holds either was paid, so the ledger lost its row (trimmed, replaced, deleted): the
analyst refuses to start and deletes nothing (paid outputs are never removed by recovery). A
charged job without output is computed again (its noise was never released); a charged id
without a folder was removed by an operator and is reported as such.

References
----------
Issue 11 (releases as jobs, paid once); SPEC.md section 5.
"""

from __future__ import annotations

import collections
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from noisyanchor.analyst.config import ReleaseLimits
from noisyanchor.analyst.privacy_budget import Charge, PrivacyLedger
from noisyanchor.analyst.storage import npy_bytes
from noisyanchor.common.errors import (
    AlreadyExistsError,
    InvalidInputError,
    LedgerError,
    NotFoundError,
    PreconditionError,
    ResourceLimitError,
)
from noisyanchor.common.files import TMP_PREFIX, atomic_write, open_under, read_under
from noisyanchor.common.npy_files import load_npy
from noisyanchor.common.scoreshield import Calibration, Regime, calibrate
from noisyanchor.common.tomlconfig import ID_PATTERN
from noisyanchor.protos.v1 import release_pb2 as pb

log = logging.getLogger(__name__)

#: Written into a job's folder right after its charge: the folder of a paid release.
CHARGED_MARK = "charged.json"

#: Files whose presence shows a job was paid for (its mark, or an output it can only have after
#: its charge).
PAID_MARKS = (CHARGED_MARK, "reply.pb", "gram.npy", "header.pb")

#: Kinds of release job.
GRAM, SCORES = "gram", "scores"

#: Seconds a repeated score request waits for the same id's computation in another call.
SCORE_WAIT_SECONDS = 60.0

#: Working memory of one Gram release, in float64 n x n matrices: the clean and noisy Grams,
#: the projection's iterates and eigendecomposition workspace, the serialised output. Measured
#: with tracemalloc at n = 800: 10.0 (Newton), 9.5 (AAP), 11.4 (Dykstra); 12 leaves a margin.
GRAM_WORKING_MATRICES = 12


def check_request_id(request_id: str) -> str:
    """``request_id`` if it is 1-64 letters, digits, ``.``, ``_`` or ``-`` (it names a folder)."""
    if not isinstance(request_id, str) or not ID_PATTERN.fullmatch(request_id):
        raise InvalidInputError(f"request_id {request_id!r} must be 1-64 letters, digits, '.', "
                                "'_' or '-', starting with a letter or digit (the client "
                                "chooses it, e.g. a UUID)")
    return request_id


def gram_working_bytes(n: int) -> int:
    """Estimated peak memory of one Gram release of ``n`` records."""
    return GRAM_WORKING_MATRICES * 8 * n * n


@dataclass
class Job:
    """One release request id of one participant, and where it stands (guarded by the
    :class:`ReleaseJobs` lock)."""

    pid: str
    request_id: str
    kind: str
    params: dict[str, Any]
    folder: Path
    charge: Charge | None = None
    state: int = pb.GramJob.QUEUED
    output_bytes: int = 0
    expected_bytes: int = 0
    started: float | None = None
    iterations: int = 0
    relative_residual: float = 0.0
    seconds: float = 0.0
    header: pb.GramHeader | None = None
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def calibration(self) -> Calibration:
        """The noise of this release, as charged (so a recomputation after a crash applies the
        charged noise too): recalibrated from the kept regime and guarantee, which must give
        the ledger row's ``sigma``; jobs kept before regimes were recorded use the row's
        ``sigma`` and sensitivity (validated by :class:`Calibration`)."""
        assert self.charge is not None
        eps, delta = float(self.params["epsilon"]), float(self.params["delta"])
        method = str(self.params["calibration"])
        if "regime" not in self.params:
            return Calibration(epsilon=eps, delta=delta, sensitivity=self.charge.sensitivity,
                               sigma=self.charge.sigma, method=method)
        cal = calibrate(eps, delta, Regime(**self.params["regime"]), method)
        if cal.sigma != self.charge.sigma:
            raise PreconditionError(f"release {self.request_id!r} was charged sigma="
                                    f"{self.charge.sigma!r}, its kept request gives "
                                    f"{cal.sigma!r}: not recomputed")
        return cal


#: ``compute_gram(job, progress) -> (header, matrix)``; ``progress(iteration, gap)``.
GramCompute = Callable[[Job, Callable[[int, float], None]], tuple[pb.GramHeader, np.ndarray]]
#: ``compute_scores(charge, record) -> reply``.
ScoreCompute = Callable[[Charge, np.ndarray], pb.ScoreRelease]


class ReleaseJobs:
    """The paid-once release jobs of one dataset (module docstring).

    Parameters
    ----------
    root : Path
        ``<store>/releases``.
    ledger : PrivacyLedger
    dataset : str
        The dataset every job is charged to.
    limits : ReleaseLimits
        Concurrency, queue, memory and storage bounds.
    tolerance : float
        Relative feasibility gap the Gram projection stops at (reported as progress).
    """

    def __init__(self, root: Path, ledger: PrivacyLedger, dataset: str, limits: ReleaseLimits,
                 tolerance: float) -> None:
        self.root = Path(root)
        self.ledger, self.dataset, self.limits = ledger, dataset, limits
        self.tolerance = tolerance
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._jobs: dict[tuple[str, str], Job] = {}
        self._waiting: collections.deque[Job] = collections.deque()
        self._compute_gram: GramCompute | None = None

    # ---- start-up --------------------------------------------------------------------------

    def open(self, compute_gram: GramCompute) -> ReleaseJobs:
        """Index the jobs on disk (removing uncharged ones), start the workers, and queue the
        paid Gram releases a crash left without output."""
        self._compute_gram = compute_gram
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for folder in sorted(p for p in self.root.glob("*/*") if p.is_dir()):
            self._recover(folder)
        for k in range(self.limits.max_concurrent):
            threading.Thread(target=self._worker, name=f"release-worker-{k}",
                             daemon=True).start()
        return self

    def _recover(self, folder: Path) -> None:
        pid, rid = folder.parent.name, folder.name
        for stale in folder.glob(TMP_PREFIX + "*"):
            stale.unlink()
        charge = self.ledger.charged(self.dataset, pid, rid)
        if charge is None:
            paid = sorted(p.name for p in folder.iterdir() if p.name in PAID_MARKS)
            if paid:  # charged once (the mark follows the charge): the ledger lost the row
                raise LedgerError(
                    f"release {pid}/{rid} was charged ({folder} holds {', '.join(paid)}) but "
                    f"the privacy ledger {self.ledger.path} has no row for it: the ledger was "
                    "trimmed, replaced or lost; refusing to start (nothing was deleted)")
            # a crash between the job record and the charge: never paid, nothing released
            log.info("release %s/%s was never charged: removed", pid, rid)
            shutil.rmtree(folder)
            return
        try:
            request = json.loads(read_under(self.root, folder / "request.json", 1 << 20))
            kind, params = request["kind"], request["params"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
            log.error("release %s/%s: unreadable job record (%s); not served", pid, rid, err)
            return
        job = Job(pid, rid, kind, params, folder, charge=charge)
        output = folder / ("header.pb" if kind == GRAM else "reply.pb")
        if output.is_file():
            job.state = pb.GramJob.DONE
            job.output_bytes = sum(p.stat().st_size for p in folder.iterdir())
            if kind == GRAM:
                job.header = pb.GramHeader.FromString(read_under(self.root, output, 1 << 20))
            job.done.set()
        elif kind == GRAM:
            log.info("release %s/%s was paid but not computed: computing it again", pid, rid)
            job.expected_bytes = int(params["expected_bytes"])
            self._waiting.append(job)
        self._jobs[(pid, rid)] = job

    # ---- limits ----------------------------------------------------------------------------

    def _kept_bytes(self, pid: str) -> int:
        return sum(j.output_bytes + (0 if j.done.is_set() else j.expected_bytes)
                   for (who, _), j in self._jobs.items() if who == pid)

    def _check_room(self, pid: str, kind: str, expected: int) -> None:
        kept, cap = self._kept_bytes(pid), self.limits.max_kept_bytes_per_participant
        if kept + expected > cap:
            raise ResourceLimitError(
                f"participant {pid!r} keeps {kept} bytes of released outputs; this release "
                f"needs {expected} more, above [release] max_kept_bytes_per_participant = {cap} "
                f"(nothing was charged; an operator can remove old releases under "
                f"{self.root / pid})")
        if kind == GRAM:
            active = sum(1 for (who, _), j in self._jobs.items()
                         if who == pid and j.kind == GRAM and not j.done.is_set())
            if active >= self.limits.max_queued_per_participant:
                raise ResourceLimitError(
                    f"participant {pid!r} already has {active} Gram releases queued or "
                    f"computing ([release] max_queued_per_participant = "
                    f"{self.limits.max_queued_per_participant}); nothing was charged, try "
                    "again when one is done")

    # ---- submitting ------------------------------------------------------------------------

    def _existing(self, pid: str, rid: str, kind: str, params: dict[str, Any]) -> Job | None:
        job = self._jobs.get((pid, rid))
        if job is None:
            if self.ledger.charged(self.dataset, pid, rid) is not None:
                raise NotFoundError(f"release {rid!r} was charged and delivered, and its output "
                                    "has since been removed by the analyst's operator")
            return None
        if job.kind != kind or job.params != params:
            raise AlreadyExistsError(
                f"request id {rid!r} already names a different release ({job.kind} "
                f"{_describe(job.params)}); use a new id for a new release")
        return job

    def _new(self, pid: str, rid: str, kind: str, params: dict[str, Any],
             calibration: Calibration, label: str, files: dict[str, bytes]) -> Job:
        """Record, charge and index a new job (under the lock)."""
        folder = self.root / pid / rid
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            for name, data in files.items():
                atomic_write(folder / name, data)
            atomic_write(folder / "request.json", json.dumps(
                {"kind": kind, "params": params, "created": time.time()}).encode())
            charge = self.ledger.charge(self.dataset, pid, calibration, request_id=rid,
                                        label=label)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        # Paid: from here on the folder is evidence of the charge, whatever becomes of the
        # ledger (recovery refuses to start rather than delete it).
        atomic_write(folder / CHARGED_MARK, json.dumps(
            {"request_id": rid, "charged_at": charge.timestamp}).encode())
        job = Job(pid, rid, kind, params, folder, charge=charge,
                  expected_bytes=int(params.get("expected_bytes", 0)))
        self._jobs[(pid, rid)] = job
        return job

    def submit_gram(self, pid: str, rid: str, params: dict[str, Any],
                    calibration: Calibration, label: str) -> tuple[Job, bool]:
        """The Gram job of ``rid``: a new one charged and queued, or the existing one.

        Returns ``(job, repeated)``; ``repeated`` is True when nothing was charged now. A job
        that FAILED is queued again (it is paid).
        """
        check_request_id(rid)
        with self._lock:
            job = self._existing(pid, rid, GRAM, params)
            if job is not None:
                if job.state == pb.GramJob.FAILED:
                    job.state, job.error = pb.GramJob.QUEUED, ""
                    job.done.clear()
                    self._waiting.append(job)
                    self._work.notify()
                return job, True
            self._check_room(pid, GRAM, int(params["expected_bytes"]))
            job = self._new(pid, rid, GRAM, params, calibration, label, {})
            self._waiting.append(job)
            self._work.notify()
            return job, False

    def gram(self, pid: str, rid: str) -> Job:
        """The caller's Gram job ``rid``."""
        check_request_id(rid)
        with self._lock:
            job = self._jobs.get((pid, rid))
            if job is None or job.kind != GRAM:
                if self.ledger.charged(self.dataset, pid, rid) is not None:
                    raise NotFoundError(f"release {rid!r} was charged, and its output has since "
                                        "been removed by the analyst's operator")
                raise NotFoundError(f"no Gram release {rid!r} of yours: submit it first")
            return job

    def queue_position(self, job: Job) -> int:
        """Releases ahead of ``job`` in the queue (0 when it is not waiting)."""
        with self._lock:
            try:
                return self._waiting.index(job) + 1
            except ValueError:
                return 0

    def scores(self, pid: str, rid: str, params: dict[str, Any], calibration: Calibration,
               label: str, record: np.ndarray, compute: ScoreCompute
               ) -> tuple[pb.ScoreRelease, bool]:
        """The score release of ``rid``: computed (and charged) once, then read back.

        Returns ``(reply, repeated)``.
        """
        check_request_id(rid)
        with self._lock:
            job = self._existing(pid, rid, SCORES, params)
            if job is None:
                self._check_room(pid, SCORES, 0)
                job = self._new(pid, rid, SCORES, params, calibration, label,
                                {"query.npy": npy_bytes(record)})
                job.state = pb.GramJob.RUNNING
                mine = True
            elif job.state in (pb.GramJob.QUEUED, pb.GramJob.FAILED):
                job.state, mine = pb.GramJob.RUNNING, True  # paid, not computed: compute it
                job.done.clear()
            else:
                mine = False
        if not mine:
            if not job.done.wait(SCORE_WAIT_SECONDS):
                raise PreconditionError(f"release {rid!r} is still being computed by another "
                                        "request; ask again")
            return self._stored_scores(job), True
        try:
            with open_under(self.root, job.folder / "query.npy") as fh:
                query = load_npy(fh, str(job.folder / "query.npy"), kinds="f")
            assert job.charge is not None
            reply = compute(job.charge, query)
            data = reply.SerializeToString()
            atomic_write(job.folder / "reply.pb", data)
        except BaseException:
            with self._lock:  # paid: a repeat computes it again, waiters are told to ask again
                job.state = pb.GramJob.FAILED
                job.done.set()
            raise
        with self._lock:
            job.state, job.output_bytes = pb.GramJob.DONE, len(data)
            job.done.set()
        return reply, False

    def _stored_scores(self, job: Job) -> pb.ScoreRelease:
        if job.state != pb.GramJob.DONE:
            raise PreconditionError(f"release {job.request_id!r} failed to compute; ask again "
                                    "(it is paid: no further charge)")
        reply = pb.ScoreRelease.FromString(read_under(self.root, job.folder / "reply.pb"))
        reply.spend.repeated = True
        return reply

    # ---- computing -------------------------------------------------------------------------

    def _worker(self) -> None:
        while True:
            with self._work:
                while not self._waiting:
                    self._work.wait()
                job = self._waiting.popleft()
                job.state, job.started = pb.GramJob.RUNNING, time.monotonic()
                job.iterations, job.relative_residual = 0, 0.0
            self._run(job)

    def _run(self, job: Job) -> None:
        assert self._compute_gram is not None and job.started is not None
        started = job.started

        def progress(iteration: int, gap: float) -> None:
            job.iterations, job.relative_residual = iteration, gap
            job.seconds = time.monotonic() - started

        try:
            header, matrix = self._compute_gram(job, progress)
            atomic_write(job.folder / "gram.npy", npy_bytes(matrix))
            del matrix
            atomic_write(job.folder / "header.pb", header.SerializeToString())  # done marker
        except Exception as err:  # the job is paid: report, keep, and let a repeat retry
            log.exception("Gram release %s/%s failed", job.pid, job.request_id)
            with self._lock:
                job.state, job.error = pb.GramJob.FAILED, f"{type(err).__name__}: {err}"
                job.seconds = time.monotonic() - started
                job.done.set()
            return
        with self._lock:
            job.state, job.header = pb.GramJob.DONE, header
            job.output_bytes = sum(p.stat().st_size for p in job.folder.iterdir())
            job.seconds = time.monotonic() - started
            job.done.set()
        log.info("Gram release %s/%s computed in %.1f s", job.pid, job.request_id, job.seconds)


def _describe(params: dict[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k not in ("expected_bytes", "record_sha256")}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
