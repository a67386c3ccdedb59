"""The demo's process handling: a failed alignment or a dead analyst is reported with its cause
at once (not after the 300 s wait), and every child is stopped, not only the analyst."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from noisyanchor.common.errors import PreconditionError
from noisyanchor.deploy.demo import _Children, wait_for_result, write_analyst, write_participant


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_failed_alignment_is_reported_with_the_analysts_error(tmp_path):
    (tmp_path / "failed.json").write_text(json.dumps({"state": "failed",
                                                      "error": "ValueError: no anchor"}))
    proc = _sleeper()
    try:
        began = time.monotonic()
        with pytest.raises(PreconditionError, match="alignment failed: ValueError: no anchor"):
            wait_for_result(tmp_path, proc, timeout=300)
        assert time.monotonic() - began < 60  # not the whole timeout (bounded, not a benchmark)
    finally:
        proc.kill()
        proc.wait()


def test_an_analyst_that_exited_is_reported_with_its_status_and_log(tmp_path):
    log = tmp_path / "analyst.log"
    log.write_text("starting\nnoisyanchor analyst: error: cannot listen on 127.0.0.1:1\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    proc.wait()
    with pytest.raises(PreconditionError, match=r"exited with status 1 .*cannot listen"):
        wait_for_result(tmp_path, proc, timeout=300, log=log)


@pytest.mark.e2e
def test_every_child_is_stopped(tmp_path):
    files = write_analyst(tmp_path, ("p0", "p1"), federation_id="demo", method="aa-igdp",
                          anchors=None, dim=None, sigma=None, v=None, accept_collusion=False,
                          data={p: tmp_path / f"{p}.npz" for p in ("p0", "p1")})
    children = _Children(tmp_path / "logs")
    for pid in ("p0", "p1"):  # nothing listens at port 1: each would retry for ten minutes
        np.savez(files.data[pid], x=np.zeros((4, 2)), labels=np.zeros(4, int))
        config = write_participant(files, pid, federation_id="demo", address="127.0.0.1:1",
                                   method="aa-igdp", anchors=None, dim=None,
                                   projection_seed=None, sigma=0.0, v=0.0, timeout=600.0)
        children.start(pid, ["participant", "upload", "--config", config])
    children.stop_all()
    assert all(proc.poll() is not None for proc in children.procs.values())
