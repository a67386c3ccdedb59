"""A federation's progress as a person reads it: the step it is at, the sites still missing for
that step, and the model's metrics once it is done.

The same view from both sides: ``participant status`` builds it from the analyst's answers
(Status, ListKeys, ListCommitments), ``analyst status`` from the analyst's store on disk.

Steps before the alignment, for a method with an anchor agreement (every method but I-GDP):
every site publishes its exchange key; the dealer seals the anchor seed to all of them and then
commits to it (its commitment is the sign that it has sealed); every other site commits; every
site uploads. Without an agreement only the uploads are waited for.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from noisyanchor.common.comparison import comparison_text
from noisyanchor.common.durations import human_duration, human_time
from noisyanchor.common.json_vocabulary import deadline_fields

#: What the sites a wait is for still have to do, by step (the words of the waiting messages).
PUBLISH_KEYS = "publish their exchange keys"
SEAL = "seal the anchor seed"
COMMIT = "commit to the anchor"
UPLOAD = "upload"


@dataclass(frozen=True)
class Pending:
    """Whom a federation waits for, and what they still have to do."""

    who: tuple[str, ...]
    what: str

    def __str__(self) -> str:
        return f"{', '.join(self.who)} to {self.what}"


@dataclass(frozen=True)
class Progress:
    """What one federation has done so far.

    Attributes
    ----------
    federation_id, state : str
        ``state``: ``collecting``, ``aligning``, ``done`` or ``failed``.
    expected : tuple of str
        Every participant, in collaboration-matrix order.
    committed : tuple of str
        Participants whose upload is committed.
    keys, commitments : tuple of str or None
        Participants that published an exchange key / a commitment to the anchor; None for a
        method without an anchor agreement.
    dealer : str or None
        The participant that seals the anchor seed.
    withdrawn : dict
        ``{participant: reason}`` of standing withdrawals.
    error : str
        Why the federation failed ("" otherwise).
    result : dict or None
        The analyst's ``result.json`` once done.
    deadline : datetime or None
        When the federation closes: the deadline the analyst enforces.
    pending_deadline : datetime or None
        A deadline its config holds that applies only at the analyst's next start (edited by
        hand while it ran); None when nothing is pending.
    """

    federation_id: str
    state: str
    expected: tuple[str, ...]
    committed: tuple[str, ...]
    keys: tuple[str, ...] | None = None
    commitments: tuple[str, ...] | None = None
    dealer: str | None = None
    withdrawn: dict[str, str] = field(default_factory=dict)
    error: str = ""
    result: dict[str, Any] | None = None
    deadline: dt.datetime | None = None
    pending_deadline: dt.datetime | None = None

    def _missing(self, done: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(p for p in self.expected if p not in done)

    def pending(self) -> Pending | None:
        """The first unfinished step and the sites missing for it; None when no site is
        waited for (aligning, done, failed, or a site withdrew)."""
        if self.state != "collecting" or self.withdrawn:
            return None
        if self.keys is not None and self.commitments is not None:
            if late := self._missing(self.keys):
                return Pending(late, PUBLISH_KEYS)
            if self.dealer is not None and self.dealer not in self.commitments:
                return Pending((self.dealer,), SEAL)
            if late := self._missing(self.commitments):
                return Pending(late, COMMIT)
        if late := self._missing(self.committed):
            return Pending(late, UPLOAD)
        return None

    def steps(self) -> list[tuple[str, tuple[str, ...]]]:
        """Each step (:data:`common.json_vocabulary.STEPS`) and the sites done with it."""
        agreement = [("exchange keys", self.keys), ("commitments", self.commitments)] \
            if self.keys is not None and self.commitments is not None else []
        return [*agreement, ("uploads", self.committed)]

    def as_dict(self) -> dict[str, Any]:
        """The progress in the ``--json`` vocabulary (:mod:`common.json_vocabulary`): the
        deadline both ways, ``steps`` with who is done and missing, ``waiting_for``
        (``{"participants": [...], "to": what}`` or None) and ``failure``."""
        pending = self.pending()
        return {"federation_id": self.federation_id, "state": self.state,
                "expected": list(self.expected), "committed": list(self.committed),
                "keys": None if self.keys is None else list(self.keys),
                "commitments": None if self.commitments is None else list(self.commitments),
                "dealer": self.dealer, "withdrawn": dict(self.withdrawn),
                "failure": self.error or None, **deadline_fields(self.deadline),
                **deadline_fields(self.pending_deadline, "pending_deadline"),
                "steps": [{"step": name, "done": list(done),
                           "missing": list(self._missing(done))}
                          for name, done in self.steps()],
                "waiting_for": None if pending is None else {"participants": list(pending.who),
                                                             "to": pending.what},
                "result": self.result}

    def lines(self, now: dt.datetime | None = None) -> list[str]:
        """The progress as lines of text: state and deadline, one line per step with who is
        missing, then whom the federation waits for, or the model's metrics once done."""
        now = now or dt.datetime.now(dt.UTC)
        head = f"federation {self.federation_id}: {self.state}"
        if self.deadline is not None and self.state in ("collecting", "aligning"):
            closed = " (closed: sites are refused)" if self.deadline <= now else ""
            head += f"; deadline {human_time(self.deadline, now)}{closed}"
            if self.pending_deadline is not None:
                head += (f"; the config says {human_time(self.pending_deadline, now)}, "
                         "from the analyst's next start")
        lines = [head]
        steps = self.steps()
        if self.state not in ("collecting", "failed"):
            steps = steps[-1:]  # the agreement is over: only the uploads are worth a line
        for name, done in steps:
            late = self._missing(done)
            lines.append(f"  {name:<13} {len(self.expected) - len(late)} of "
                         f"{len(self.expected)}" + (f", missing {', '.join(late)}" if late
                                                    else ""))
        lines += [f"  {pid} withdrew: {reason}" for pid, reason in self.withdrawn.items()]
        if self.error:
            lines.append(f"  error: {self.error}")
        if (waiting := self.pending()) is not None:
            lines.append(f"waiting for {waiting}")
        elif self.state == "aligning":
            lines.append("every upload is in: the analyst is aligning them")
        if self.result is not None:
            lines += result_lines(self.result)
        return lines


def result_lines(result: dict[str, Any]) -> list[str]:
    """The alignment and the model's held-out metrics of a ``result.json``."""
    solver = result.get("solver") or {}
    parts = [str(solver.get("name", "alignment"))]
    for flag in ("converged", "certified"):
        if flag in solver:
            parts.append(flag if solver[flag] else f"not {flag}")
    if solver.get("iterations") is not None:
        parts.append(f"{solver['iterations']} iterations")
    seconds = result.get("seconds")
    took = f" in {human_duration(seconds)}" if isinstance(seconds, int | float) else ""
    lines = [f"  alignment: {', '.join(parts)}{took}; {result.get('records', '?')} records"]
    screening = result.get("screening") or {}
    for site in screening.get("flagged", ()):  # named before alignment: site and reason
        what = "excluded" if site in screening.get("excluded", ()) else "aligned anyway"
        reasons = "; ".join(f["reason"] for f in screening["findings"] if f["site"] == site)
        lines.append(f"  screening ({screening.get('policy')}): {site} {what}: {reasons}")
    model = result.get("model")
    if model is None:
        lines.append("  model: none configured")
    elif "error" in model:
        lines.append(f"  model {model.get('name')}: not fitted: {model['error']}")
    else:
        lines.append(f"  model {model.get('name')}: held-out balanced accuracy "
                     f"{model['balanced_accuracy']:.4f} on {model['n_test']} test rows "
                     f"({model['n_train']} training rows)")
        alone = model.get("participant_only_balanced_accuracy")
        if alone is not None:
            # Issue 34: "told only whose record each row is" left the operator guessing.
            lines.append(f"    (baseline: the same model knowing only which site each record "
                         f"comes from scores {alone:.4f}; near it, it learned nothing from the "
                         "records)")
        for site, metrics in (model.get("sites") or {}).items():
            score = metrics.get("balanced_accuracy")
            # The gain against a local-only model on the site's own rows of Z, when told.
            gain = (f"; against a local-only model on its own rows of Z: "
                    f"{comparison_text(metrics)}" if "gain_not_told" in metrics else "")
            lines.append(f"    on {site}'s {metrics.get('n_test', 0)} test rows: " + (
                "no test rows" if score is None else f"balanced accuracy {score:.4f}") + gain)
    return lines
