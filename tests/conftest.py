"""Shared test fixtures.

Tests run many small linear-algebra problems, often beside other processes: one BLAS thread per
process avoids OpenBLAS's busy-waiting threads slowing everything down under contention.
"""

import os
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every ``extended`` or ``audit`` test is also ``slow``, so the inner loop (``-m "not e2e
    and not slow"``), whose ``-m`` replaces the default, skips it too."""
    for item in items:
        if (item.get_closest_marker("extended") or item.get_closest_marker("audit")) \
                and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator: tests are reproducible."""
    return np.random.default_rng(20261129)


TOY_PLUGINS = '''"""A toy plug-in package for noisyanchor's tests (one attack, one auditor)."""
import numpy as np


def centred_upload(view, target):
    """The target's upload centred, no key at all: a baseline any real attack must beat."""
    if not view.method.uses_anchor:
        return None
    y = view.data[target]
    return y - y.mean(axis=0)


class _Raw:
    def embed(self, x):
        return np.asarray(x, dtype=float)


def fit_raw(data):
    """Raw features compared by cosine."""
    return _Raw()
'''


def write_plugin_package(root, entry_points: str, module: str = TOY_PLUGINS,
                         name: str = "toy_noisyanchor_plugins") -> None:
    """An installed-looking distribution in ``root``: a module and a ``.dist-info`` folder whose
    ``entry_points.txt`` importlib.metadata reads once ``root`` is on ``sys.path``."""
    (root / f"{name}.py").write_text(module)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def toy_plugins(tmp_path, monkeypatch):
    """The toy plug-in package registered (attack ``toy_centred``, auditor ``toy_raw``) for this
    test; returns the folder to put on PYTHONPATH for subprocesses."""
    root = tmp_path / "plugins"
    root.mkdir()
    write_plugin_package(root, "[noisyanchor.attacks]\n"
                               "toy_centred = toy_noisyanchor_plugins:centred_upload\n\n"
                               "[noisyanchor.auditors]\n"
                               "toy_raw = toy_noisyanchor_plugins:fit_raw\n")
    monkeypatch.syspath_prepend(str(root))
    return root


@pytest.fixture
def write_plugin():
    """:func:`write_plugin_package`, for tests that register plug-ins of their own."""
    return write_plugin_package


#: The distribution's Chromium (Debian's package ``chromium``), which the browser tests drive.
CHROMIUM = Path("/usr/bin/chromium")

#: Headless, and nothing that reaches beyond 127.0.0.1 (updates, sync, QUIC probes).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture
def browser_page():
    """A page of a headless Chromium driven by Playwright, and the console errors and page
    errors it reports (a CSP violation is one); skipped, with the reason, without Chromium.

    Playwright drives the distribution's browser: never ``playwright install``, which downloads
    a browser of its own.
    """
    if not CHROMIUM.is_file():
        pytest.skip(f"no {CHROMIUM}: the browser tests need the distribution's Chromium "
                    "(apt-get install chromium; .ci/run installs it when it runs as root)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the browser tests need playwright (the dev extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda err: errors.append(str(err)))
            yield page, errors
        finally:
            browser.close()
