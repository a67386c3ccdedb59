"""Multi-host: the analyst and three sites in separate Linux network namespaces joined by a
bridge, each with its own IP. The analyst binds its namespace's address; its certificate carries
its DNS name and IP as SANs; two sites connect by name (an /etc/hosts override per namespace,
which ``ip netns exec`` mounts from /etc/netns/NAME/hosts), one by IP with ``server_name``.

Skipped, with the reason, where namespaces cannot be made (not root, no iproute2, no
CAP_NET_ADMIN in a container).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from noisyanchor.deploy.demo import wait_for_result
from noisyanchor.deploy.launch import child_env, stop, write_toml
from noisyanchor.deploy.pilot import SITES, write_site_data

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The analyst's name on its certificate and in the sites' hosts files.
ANALYST_NAME = "analyst.pilot.test"
SUBNET = "10.251.{}.{}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Hosts:
    """Namespaces ``<tag>-<host>`` with veth pairs into a bridge namespace; removed on close."""

    def __init__(self, names: list[str]) -> None:
        self.tag = f"na{uuid.uuid4().hex[:6]}"
        self.net = int(uuid.uuid4().int % 200) + 20
        self.bridge = f"{self.tag}-br"
        self.names = names
        self.ips = {name: SUBNET.format(self.net, i + 1) for i, name in enumerate(names)}
        self.made: list[str] = []

    def ns(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def up(self) -> None:
        _ip("netns", "add", self.bridge)
        self.made.append(self.bridge)
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            ns = self.ns(name)
            _ip("netns", "add", ns)
            self.made.append(ns)
            veth = f"v{i}"
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth,
                "netns", self.bridge)
            _ip("-n", self.bridge, "link", "set", veth, "master", "br0")
            _ip("-n", self.bridge, "link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{self.ips[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def hosts_file(self, name: str, text: str) -> None:
        folder = Path("/etc/netns") / self.ns(name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text(text)

    def start(self, name: str, args: list, log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            return subprocess.Popen(["ip", "netns", "exec", self.ns(name), sys.executable, "-m",
                                     "noisyanchor", *map(str, args)], stdout=out,
                                    stderr=subprocess.STDOUT, env=child_env())

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


@pytest.fixture
def hosts():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need iproute2's ip command")
    made = Hosts(["analyst", *SITES])
    try:
        made.up()
    except (subprocess.CalledProcessError, OSError) as err:
        made.close()
        reason = err.stderr.strip() if isinstance(err, subprocess.CalledProcessError) else err
        pytest.skip(f"cannot make network namespaces here: {reason}")
    yield made
    made.close()


def _project(root: Path, hosts: Hosts, port: int) -> Path:
    path = write_toml(root / "federation.toml", {
        "project": {"name": "multihost", "validity_days": 7},
        "analyst": {"names": [ANALYST_NAME], "addresses": [hosts.ips["analyst"]],
                    "bind": hosts.ips["analyst"], "port": port},
        "federation": {"method": "aa-igdp-an", "anchors": 64, "dim": 16,
                       "projection_seed": 7, "v": 0.02, "dealer": SITES[0]},
        "schema": {"features": 64},
    })
    with path.open("a") as fh:
        for site in SITES:
            fh.write(f'\n[[site]]\nname = "{site}"\ndata = "data/{site}.csv"\n')
    return path


def test_analyst_and_three_sites_on_separate_hosts(tmp_path, hosts):
    port = 50051
    project = _project(tmp_path, hosts, port)
    made = subprocess.run([sys.executable, "-m", "noisyanchor", "provision", "--project",
                           project], capture_output=True, text=True, env=child_env(), timeout=120)
    assert made.returncode == 0, made.stderr
    kits = tmp_path / "kits"
    write_site_data(kits)
    for site in SITES[:2]:  # these two find the analyst by name
        hosts.hosts_file(site, f"127.0.0.1 localhost\n{hosts.ips['analyst']} {ANALYST_NAME}\n")
    third = kits / SITES[2] / f"{SITES[2]}.toml"  # this one by IP, the name checked on the cert
    third.write_text(third.read_text().replace(f'analyst = "{ANALYST_NAME}:{port}"',
                                               f'analyst = "{hosts.ips["analyst"]}:{port}"'))
    logs = tmp_path / "logs"
    procs = [hosts.start("analyst", ["analyst", "serve", "--config",
                                     kits / "analyst" / "analyst.toml"], logs / "analyst.log")]
    try:
        sites = [hosts.start(site, ["participant", "upload", "--config",
                                    kits / site / f"{site}.toml"], logs / f"{site}.log")
                 for site in SITES]
        procs += sites
        codes = [p.wait(300) for p in sites]
        assert codes == [0, 0, 0], {s: (logs / f"{s}.log").read_text()[-600:] for s in SITES}
        result = wait_for_result(kits / "analyst" / "store", procs[0], 120)
    finally:
        for p in procs:
            stop(p)
    analyst_log = (logs / "analyst.log").read_text()
    assert f"on {hosts.ips['analyst']}:{port}" in analyst_log  # bound its own address only
    for site in SITES:  # each connection came from the site's own host
        assert f"{site} connected from ipv4:{hosts.ips[site]}:" in analyst_log
    assert result["participants"] == list(SITES) and "balanced_accuracy" in result["model"]
