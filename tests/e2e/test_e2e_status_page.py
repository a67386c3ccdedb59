"""The operator's status page in a real headless Chromium over a real federation (issue 34):
the analyst, three sites and ``analyst status --serve`` as separate processes; the page shows
the site the others wait for, then, without being reloaded, the finished federation with the
model's metrics and every site's gain; ``/status.json`` is what ``analyst status --json``
prints. Screenshots: in the test's folder, and the last one in build/test-artifacts/ (ignored
by git; CI keeps it as an artefact)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
from e2e_support import free_port, wait_until

from noisyanchor.deploy.launch import start, stop
from noisyanchor.deploy.pilot import SITES, write_project, write_site_data
from noisyanchor.deploy.provision import provision

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"

#: Milliseconds the page may take to show a state the store reached (polls every 3 s; the
#: alignment, the model and the contributions take a minute or more under load).
SHOWN_WITHIN_MS = 600_000


def _steps(page) -> dict[str, list[str]]:
    """The page's steps table: {step: [done, missing]}."""
    rows = page.locator("#steps tr").all_inner_texts()[1:]
    return {cells[0]: cells[1:] for cells in (row.split("\t") for row in rows)}


def _fetch(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/json"
        return json.loads(answer.read())


def test_the_status_page_shows_the_missing_site_then_the_finished_federation(tmp_path,
                                                                             browser_page):
    page, errors = browser_page
    # The page's CSP forbids eval, which wait_for_function's string predicates use: expect()
    # waits through Playwright's own selector engine instead.
    expect = pytest.importorskip("playwright.sync_api").expect
    kits = provision(write_project(tmp_path, free_port())).out
    analyst_toml = kits / "analyst" / "analyst.toml"
    # A DP release budget, so that the page shows what is spent of it (nothing yet).
    analyst_toml.write_text(analyst_toml.read_text()
                            + "\n[privacy]\nepsilon_budget = 4.0\ndelta_budget = 1e-5\n")
    write_site_data(kits)
    logs, port = tmp_path / "logs", free_port()
    procs = {"analyst": start(["analyst", "serve", "--config", analyst_toml],
                              logs / "analyst.log"),
             "page": start(["analyst", "status", "--config", analyst_toml, "--serve",
                            f"127.0.0.1:{port}"], logs / "page.log")}
    try:
        assert wait_until(lambda: "status page of federation pilot: http://127.0.0.1:"
                          f"{port}/" in (logs / "page.log").read_text(), 60), \
            (logs / "page.log").read_text()
        for site in SITES[:2]:
            procs[site] = start(["participant", "upload", "--config", kits / site /
                                 f"{site}.toml"], logs / f"{site}.log")
        page.goto(f"http://127.0.0.1:{port}/")
        page.evaluate("window.__loadedOnce = true")  # gone if the page were reloaded
        # org-a and org-b published their keys; org-c, not started, is missing for every step.
        expect(page.locator("#waiting")).to_have_text(
            "waiting for org-c to publish their exchange keys", timeout=SHOWN_WITHIN_MS)
        steps = _steps(page)
        assert steps["exchange keys"] == ["2 of 3", "org-c"], steps
        assert "org-c" in steps["uploads"][1] and steps["uploads"][0] == "0 of 3", steps
        assert page.inner_text("#title") == "federation pilot: collecting"
        assert "deadline " in page.inner_text("#summary")
        assert "spent epsilon" in page.inner_text("#privacy")
        page.screenshot(path=tmp_path / "status_page_waiting.png", full_page=True)

        procs["org-c"] = start(["participant", "upload", "--config", kits / "org-c" /
                                "org-c.toml"], logs / "org-c.log")
        for site in SITES:
            assert procs[site].wait(600) == 0, (logs / f"{site}.log").read_text()[-2000:]
        expect(page.locator("#title")).to_have_text("federation pilot: done",
                                                    timeout=SHOWN_WITHIN_MS)
        expect(page.locator("#sites tr")).to_have_count(1 + len(SITES), timeout=30_000)
        assert page.evaluate("window.__loadedOnce") is True  # refreshed, never reloaded
        steps = _steps(page)
        assert steps == {"uploads": ["3 of 3", "none"]}, steps
        document = _fetch(port, "/status.json")
        model = document["result"]["model"]
        model_row = page.locator("#model tr").nth(1).inner_text().split("\t")
        assert model_row[:2] == ["logistic", f"{model['balanced_accuracy']:.4f}"]
        assert model["balanced_accuracy"] > 0.8  # digits, ten classes: chance is 0.1
        for site in SITES:
            row = page.locator("#sites tr", has_text=site).inner_text().split("\t")
            metrics = model["sites"][site]
            assert row[0] == site and row[2] == f"{metrics['balanced_accuracy']:.4f}", row
            gain = metrics["gain"]
            assert row[3] == (f"not told: {metrics['gain_not_told']}" if gain is None
                              else f"{gain:+.3f}"), row
        page.screenshot(path=tmp_path / "status_page.png", full_page=True)
        # The page's JSON is the operator's status: the same document, from the same function.
        printed = start(["analyst", "status", "--config", analyst_toml, "--json"],
                        logs / "status.json")
        assert printed.wait(60) == 0
        assert json.loads((logs / "status.json").read_text()) == document
    finally:
        for proc in procs.values():
            stop(proc)
    assert procs["page"].returncode == 0  # SIGTERM: a clean exit
    assert errors == []  # no CSP violation, no script error
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / "status_page.png", ARTIFACTS / "status_page.png")
