"""One JSON vocabulary for every ``--json`` output of the ``noisyanchor`` command.

The same thing has the same name and the same type in every command's output: a script that
reads ``analyst status --json`` reads ``participant status --json`` with the same code, and a
refused command answers in one shape whatever the command. :data:`TERMS` names each shared
key, its type and its meaning; :func:`problems` checks an output against them (the tests run
every ``--json`` command through it). ``docs/json.md`` is the reader's copy, with an example
per command and the exit codes.

Keys an earlier contract pinned (``result.json``'s and ``gain.json``'s: ``gain``,
``gain_interval``, ``projection_costs``, ``contributions``, ``screening``, ...) are kept as
they are and arrive nested under ``result`` and ``gain``. Nested objects may use ``error`` for
a part that could not be had (a string); at the top level ``error`` is only ever the refusal
object of :func:`error_object`.

Only the standard library is imported: ``noisyanchor --help`` must stay light.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Exit status of every command (``noisyanchor --help`` and docs/json.md say the same).
EXIT_CODES = {0: "success",
              1: "refused or failed (the error object on stdout with --json, the text on "
                 "stderr); `analyst status --wait` also exits 1, with the progress, when the "
                 "wait ended without the federation done",
              2: "command-line usage error (the error object, code USAGE)",
              130: "interrupted (Ctrl-C)",
              141: "the reader of stdout went away (`... | head`)"}

#: A federation's states, in the order they are reached (``failed`` runs again at a restart).
STATES = ("collecting", "aligning", "done", "failed")

#: The steps a federation waits for, in order (``steps[].step``); an agreement-free method
#: has only ``uploads``.
STEPS = ("exchange keys", "commitments", "uploads")


def error_object(command: str, message: str, code: str, exit_code: int) -> dict:
    """What a refused command prints on stdout with ``--json``, the same for every command.

    ``code`` is the error's kind: the gRPC status name of the project's error (``grpc_code``:
    ``INVALID_ARGUMENT``, ``ALREADY_EXISTS``, ``FAILED_PRECONDITION``, ``UNAVAILABLE``, ...),
    or ``USAGE`` for a command-line usage error; ``exit_code`` the command's exit status.
    """
    return {"error": {"command": command, "message": message, "code": code,
                      "exit_code": exit_code}}


def deadline_fields(deadline: dt.datetime | None, name: str = "deadline") -> dict[str, Any]:
    """``name`` (ISO 8601 text with its offset) and ``name_unix`` (seconds since the Unix
    epoch), both None without a deadline: every output names a deadline this way."""
    if deadline is None:
        return {name: None, f"{name}_unix": None}
    return {name: deadline.isoformat(), f"{name}_unix": deadline.timestamp()}


# -- type checks: each returns why a value does not fit, or "" -----------------------------------
Check = Callable[[Any], str]


def _text(value: Any) -> str:
    return "" if isinstance(value, str) else "not a string"


def _names(value: Any) -> str:
    ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    return "" if ok else "not a list of site ids"


def _number(value: Any) -> str:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return "" if ok else "not a number"


def _count(value: Any) -> str:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return "" if ok else "not a count (a whole number >= 0)"


def _time(value: Any) -> str:
    try:
        ok = isinstance(value, str) and dt.datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        ok = False
    return "" if ok else "not an ISO 8601 date-time with an offset"


def _object(value: Any) -> str:
    return "" if isinstance(value, dict) else "not an object"


def _by_site(value: Any) -> str:
    return "" if isinstance(value, dict) and all(isinstance(k, str) for k in value) else \
        "not an object keyed by site id"


def _reasons(value: Any) -> str:
    ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                         for k, v in value.items())
    return "" if ok else "not an object {site id: reason}"


def _state(value: Any) -> str:
    return "" if value in STATES else f"not one of {', '.join(STATES)}"


def _waiting(value: Any) -> str:
    ok = isinstance(value, dict) and set(value) == {"participants", "to"} and \
        not _names(value["participants"]) and isinstance(value["to"], str)
    return "" if ok else 'not {"participants": [site ids], "to": what they still have to do}'


def _steps(value: Any) -> str:
    ok = isinstance(value, list) and all(
        isinstance(s, dict) and set(s) == {"step", "done", "missing"} and s["step"] in STEPS
        and not _names(s["done"]) and not _names(s["missing"]) for s in value)
    return "" if ok else 'not a list of {"step", "done": [site ids], "missing": [site ids]}'


def _part(value: Any) -> str:
    """An object that may say why it could not be had (``{"error": "..."}``)."""
    if not isinstance(value, dict):
        return "not an object"
    return "" if isinstance(value.get("error", ""), str) else "its 'error' is not a string"


def _refusal(value: Any) -> str:
    ok = isinstance(value, dict) and set(value) == {"command", "message", "code", "exit_code"} \
        and all(isinstance(value[k], str) for k in ("command", "message", "code")) \
        and value["exit_code"] in (1, 2) and (value["code"] == "USAGE") == (
            value["exit_code"] == 2)
    return "" if ok else ('not the refusal object {"command", "message", "code", "exit_code"} '
                          "(exit_code 1, or 2 with code USAGE)")


def _or_none(check: Check) -> Check:
    return lambda value: "" if value is None else check(value)


@dataclass(frozen=True)
class Term:
    """One key of the vocabulary: the type check of its value and what it means."""

    check: Check
    meaning: str


#: Every shared key, wherever it appears at the top level of an output.
TERMS: dict[str, Term] = {
    "federation_id": Term(_text, "the federation's id ([project] name)"),
    "participant": Term(_text, "the site this output is about (its participant id)"),
    "state": Term(_state, "the federation's state: " + ", ".join(STATES)),
    "deadline": Term(_or_none(_time), "when the federation closes: ISO 8601 with its offset; "
                     "null: none (sites wait 1 h)"),
    "deadline_unix": Term(_or_none(_number), "the same instant as deadline, in seconds since "
                          "the Unix epoch; null: none"),
    "pending_deadline": Term(_or_none(_time), "a deadline the analyst's config holds that "
                             "applies only at its next start (edited by hand while it ran); "
                             "null: none pending"),
    "pending_deadline_unix": Term(_or_none(_number), "the same instant as pending_deadline"),
    "expected": Term(_names, "every site, in the collaboration matrix's order"),
    "committed": Term(_names, "the sites whose upload is committed"),
    "keys": Term(_or_none(_names), "the sites that published their exchange key (null: the "
                 "method has no anchor agreement)"),
    "commitments": Term(_or_none(_names), "the sites that committed to the anchor (null: no "
                        "anchor agreement)"),
    "dealer": Term(_or_none(_text), "the site that seals the anchor seed"),
    "steps": Term(_steps, "each step in order, with the sites done and missing"),
    "waiting_for": Term(_or_none(_waiting), "whom the federation waits for and what they still "
                        "have to do; null: nobody (aligning, done, failed, or a site withdrew)"),
    "withdrawn": Term(_reasons, "standing withdrawals: {site id: the reason it gave}"),
    "failure": Term(_or_none(_text), "why the last alignment failed (state failed); null "
                    "otherwise"),
    "result": Term(_or_none(_object), "the analyst's result.json once done (the model's "
                   "metrics under model; a site sees its own and the federation's only)"),
    "gain": Term(_or_none(_part), "the site's gain.json: what joining gained it (gain, "
                 "gain_interval, ...), or {\"error\": why it cannot be had}"),
    "contribution": Term(_or_none(_part), "the site's own contribution aggregates"),
    "sites": Term(_by_site, "per-site entries, keyed by site id"),
    "records": Term(_count, "how many records"),
    "seconds": Term(_number, "wall-clock seconds the command took"),
    "error": Term(_refusal, "a refused command: command, message, code (gRPC status name or "
                  "USAGE), exit_code"),
}

#: Time points named twice, as ``name`` (ISO 8601) and ``name_unix`` (seconds).
TIME_POINTS = ("deadline", "pending_deadline")


def _pair(output: dict, name: str) -> list[str]:
    """Why ``name`` and ``name_unix`` in ``output`` do not name one instant ([] if they do)."""
    unix = f"{name}_unix"
    if (name in output) != (unix in output):
        return [f"{name!r} and {unix!r} come together"]
    if name not in output or TERMS[name].check(output[name]) or TERMS[unix].check(output[unix]):
        return []  # absent, or already found wrong
    when, seconds = output[name], output[unix]
    if (when is None) != (seconds is None):
        return [f"{name!r} and {unix!r} are both null or neither"]
    if when is not None and abs(dt.datetime.fromisoformat(when).timestamp() - seconds) > 1:
        return [f"{name!r} and {unix!r} name different instants"]  # ISO keeps microseconds
    return []


def problems(output: Any) -> list[str]:
    """Where ``output`` (a parsed ``--json`` output) departs from :data:`TERMS`; empty when it
    fits. A refusal is the error object alone; each of :data:`TIME_POINTS` comes with its
    ``_unix`` twin, naming the same instant."""
    if not isinstance(output, dict):
        return ["the output is not a JSON object"]
    found = [f"{key!r}: {why}" for key, value in output.items() if key in TERMS
             and (why := TERMS[key].check(value))]
    if "error" in output and len(output) > 1:
        found.append("a refusal holds the error object only")
    for name in TIME_POINTS:
        found += _pair(output, name)
    return found
