"""Fixtures of the end-to-end tests: a real analyst process over mutual TLS on 127.0.0.1, with
its PKI and config in a temporary folder, always stopped at the end."""

from __future__ import annotations

import pytest
from e2e_support import FEDERATION, RunningAnalyst

from noisyanchor.deploy.demo import write_analyst
from noisyanchor.deploy.launch import start, stop, wait_for_port


@pytest.fixture
def analyst(tmp_path):
    """Factory: ``analyst(ids, method, ...)`` starts an analyst process and returns it."""
    running: list[RunningAnalyst] = []

    def _start(ids, method="aa-igdp", *, dim=8, anchors=16, accept_collusion=False,
               extra_certificates=(), port=0, stream_idle_timeout=None,
               extra=None) -> RunningAnalyst:
        files = write_analyst(tmp_path / f"fed{len(running)}", tuple(ids), federation_id=FEDERATION,
                              method=method, anchors=anchors, dim=dim, sigma=None, v=None,
                              accept_collusion=accept_collusion,
                              extra_certificates=tuple(extra_certificates),
                              stream_idle_timeout=stream_idle_timeout, keep_ca_key=True,
                              extra=extra)
        log = files.root / "analyst.log"
        args = ["analyst", "serve", "--config", files.analyst_config]
        proc = start(args + (["--port", port] if port else []), log)
        a = RunningAnalyst(files, method, wait_for_port(files.port_file, proc), proc, log, [proc])
        running.append(a)
        return a

    yield _start
    for a in running:
        for proc in a.procs:
            stop(proc)
