"""What ``noisyanchor analyst status`` tells the operator, as one JSON document: the same
document ``--json`` prints and the status page (:mod:`analyst.status_page`) serves as
``/status.json``, so the page can show nothing the operator's status does not.

* :func:`operator_status`: the federation's progress from the store (:func:`analyst.kit.
  store_progress`: steps, who is missing, the deadline, withdrawals, the result with the
  model's metrics, each site's gain and contributions), whether the analyst serves, and the
  privacy budget the DP releases spent;
* :func:`privacy_spent` reads the privacy ledger read-only (the running analyst owns it);
* :func:`status_lines`: the same document as the text ``analyst status`` prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noisyanchor.analyst.config import AnalystConfig
from noisyanchor.analyst.contributions import operator_lines
from noisyanchor.analyst.kit import store_progress
from noisyanchor.common.errors import LedgerError
from noisyanchor.common.progress import Progress

if TYPE_CHECKING:
    from noisyanchor.analyst.privacy_budget import Account


def operator_status(config: AnalystConfig, progress: Progress | None = None) -> dict[str, Any]:
    """``analyst status --json``: ``progress`` (default: read from the store now) with the
    store's folder, whether the analyst serves and the privacy budget spent."""
    progress = progress if progress is not None else store_progress(config)
    return progress.as_dict() | {"store": str(config.output_dir),
                                 "analyst": analyst_running(config),
                                 "privacy": privacy_spent(config)}


def analyst_running(config: AnalystConfig) -> str | None:
    """Whether the analyst serves, from its health port (None: no health port configured)."""
    if config.health_port is None:
        return None
    from noisyanchor.common.logs import quiet_grpc_core

    quiet_grpc_core()
    from noisyanchor.analyst.health import check_health

    answer = check_health(f"127.0.0.1:{config.health_port}", timeout=2.0)
    if answer == "SERVING":
        return "running (health SERVING)"
    if answer.startswith("UNREACHABLE"):
        return f"not running (nothing answers on its health port {config.health_port})"
    return f"not serving (health port {config.health_port}: {answer})"


def privacy_spent(config: AnalystConfig) -> dict[str, Any] | None:
    """The DP releases' budget of the federation's dataset: spent and left, overall and of each
    participant's quota, as the ledger holds them (None: no ``[privacy]`` table, releases are
    refused). A ledger that cannot be read gives ``{"error": why}``, as the analyst would
    refuse to start on it.

    Every epsilon is the composed epsilon at ``delta`` (``delta_budget``); ``left_epsilon`` is
    what one more release could still have (composition is not additive).
    """
    privacy = config.privacy
    if privacy is None:
        return None
    from noisyanchor.analyst.privacy_budget import LEDGER_HEAD, PrivacyLedger
    from noisyanchor.analyst.storage import Store

    dataset = config.federation_id  # the one dataset the analyst releases from
    # The analyst writes the ledger, then its head: a read between the two sees the ledger one
    # row behind its head once; the second read sees both written.
    for attempt in range(2):
        try:
            ledger = PrivacyLedger(
                config.ledger_path, privacy.epsilon_budget, privacy.delta_budget,
                participants=config.participants,
                participant_epsilon_budget=privacy.participant_epsilon_budget,
                participant_max_releases=privacy.participant_max_releases,
                head_path=Store(config.output_dir).root / LEDGER_HEAD, read_only=True)
            break
        except LedgerError as err:
            if attempt:
                return {"error": str(err)}
    whole = ledger.account(dataset)
    return {"dataset": dataset, "delta": whole.delta, "epsilon_budget": whole.budget_epsilon,
            "spent_epsilon": whole.spent_epsilon, "left_epsilon": whole.left_epsilon,
            "releases": whole.releases,
            "participants": {pid: _quota(ledger.account(dataset, pid))
                             for pid in config.participants}}


def _quota(account: Account) -> dict[str, Any]:
    return {"epsilon_budget": account.budget_epsilon, "spent_epsilon": account.spent_epsilon,
            "left_epsilon": account.left_epsilon, "releases": account.releases,
            "max_releases": account.max_releases}


def privacy_lines(privacy: dict[str, Any] | None) -> list[str]:
    """``analyst status``'s lines about :func:`privacy_spent`."""
    if privacy is None:
        return []
    if "error" in privacy:
        return [f"  privacy budget: cannot be read: {privacy['error']}"]
    lines = [f"  privacy budget (DP releases of {privacy['dataset']}, at delta="
             f"{privacy['delta']:g}): spent epsilon={privacy['spent_epsilon']:.4g} of "
             f"{privacy['epsilon_budget']:.4g} in {privacy['releases']} releases, left "
             f"{privacy['left_epsilon']:.4g} for one more"]
    lines += [f"    {pid}: spent {q['spent_epsilon']:.4g} of {q['epsilon_budget']:.4g}, "
              f"{q['releases']} of {q['max_releases']} releases"
              for pid, q in privacy["participants"].items() if q["releases"]]
    return lines


def status_lines(document: dict[str, Any], progress: Progress) -> list[str]:
    """``analyst status``'s text: ``progress`` as lines, the contributions and the privacy
    budget of ``document`` (:func:`operator_status`), the store and the analyst."""
    running = document["analyst"]
    return (progress.lines()
            + operator_lines((progress.result or {}).get("contributions"))
            + privacy_lines(document["privacy"])
            + [f"store {document['store']}" + (f"; analyst {running}" if running else "")])
