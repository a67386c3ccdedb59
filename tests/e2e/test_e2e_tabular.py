"""Sites whose table is refused withdraw: their operator reads the file, line, column and
value; the other sites are told which site withdrew and where (never the value, never a
local path) and stop waiting; nothing stored at the analyst changes."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import subprocess
import sys

import pytest
from e2e_support import FEDERATION, random_upload, wait_until

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.tabular import TabularSchema
from noisyanchor.common.tomlconfig import read_toml
from noisyanchor.common.wire import bundle_spec
from noisyanchor.deploy.demo import write_analyst, write_participant
from noisyanchor.deploy.launch import child_env, start, stop, wait_for_port, write_toml
from noisyanchor.participant.client import AnalystClient
from noisyanchor.participant.config import load_participant_config
from noisyanchor.participant.run import analyst_status, run_upload

pytestmark = pytest.mark.e2e

IDS = ("p0", "p1", "p2")

#: A typed schema: two scaled numbers, a category, a boolean; text labels.
SCHEMA = {"label": "outcome", "label_classes": ["no", "yes"], "column": [
    {"name": "area", "unit": "mm2", "min": 0.0, "max": 1000.0},
    {"name": "ratio", "center": 0.5, "scale": 0.25},
    {"name": "region", "type": "categorical", "categories": ["north", "south"]},
    {"name": "smoker", "type": "boolean"}]}

HEADER = "record_id,area,ratio,region,smoker,outcome"


def _table(n: int, bad: tuple[int, str, str | None] | None = None) -> str:
    """``n`` good records (line 2 onward) and a blank trailing line, as spreadsheets export
    them; ``bad = (line, column, text)`` replaces one cell (text None: the row ends before
    that column, a short row)."""
    names = HEADER.split(",")
    rows = [[f"r{i}", f"{100 + 37 * i % 800}", f"{0.1 + 0.05 * (i % 10):.2f}",
             ("north", "south")[i % 2], ("yes", "no")[i % 3 == 0], ("no", "yes")[i % 2]]
            for i in range(n)]
    if bad is not None:
        line, column, text = bad
        if text is None:
            del rows[line - 2][names.index(column):]
        else:
            rows[line - 2][names.index(column)] = text
    return "\n".join([HEADER, *(",".join(r) for r in rows)]) + "\n\n"


def _store_state(store) -> dict[str, str]:
    """Digest of every file the analyst stored, except the withdrawals themselves."""
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and "withdrawn" not in p.parts}


@contextlib.contextmanager
def _federation(root):
    """An analyst with the typed schema, and a config per site (data under ``exports/``)."""
    data = {pid: root / "exports" / f"{pid}.csv" for pid in IDS}
    files = write_analyst(root, IDS, federation_id=FEDERATION, method="aa-igdp", anchors=None,
                          dim=None, sigma=None, v=None, accept_collusion=False, data=data,
                          extra={"schema": SCHEMA})
    proc = start(["analyst", "serve", "--config", files.analyst_config], root / "analyst.log")
    try:
        port = wait_for_port(files.port_file, proc)
        configs = {pid: write_participant(files, pid, federation_id=FEDERATION,
                                          address=f"127.0.0.1:{port}", method="aa-igdp",
                                          anchors=None, dim=None, projection_seed=None,
                                          sigma=0.0, v=0.0, timeout=60.0) for pid in IDS}
        yield files, configs
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """One federation for the refusals (a withdrawal stands until the site joins again)."""
    with _federation(tmp_path_factory.mktemp("tabular")) as fed:
        yield fed


@pytest.mark.parametrize("bad, where, local", [
    ((7, "area", "12O"), "line 7, column 'area': the value is not a number", "'12O'"),
    ((5, "ratio", "NaN"), "line 5, column 'ratio': the value is not a finite number", "'NaN'"),
    ((9, "region", "west"), "line 9, column 'region': the value is not one of the declared",
     "'west'"),
    ((4, "smoker", ""), "line 4, column 'smoker': the cell is empty", "is empty"),
    ((6, "outcome", "maybe"), "line 6, column 'outcome': the value is not one of the declared "
     "label classes", "'maybe'"),
    ((3, "area", "1,5"), "line 3, column 'field 7': the row has 7 fields, the header 6", "7"),
    ((8, "smoker", None), "line 8, column 'smoker': the row has 4 fields, the header 6",
     "4 fields"),
])
def test_a_site_whose_table_is_refused_withdraws_naming_line_and_column(federation, bad, where,
                                                                       local):
    files, configs = federation
    files.data["p2"].parent.mkdir(exist_ok=True)
    files.data["p2"].write_text(_table(12, bad))
    cfg = load_participant_config(configs["p2"])
    before = _store_state(files.store)
    with pytest.raises(InvalidInputError) as err:
        run_upload(cfg)
    message = str(err.value)
    assert str(files.data["p2"]) in message and where.split(":")[0] in message and local in \
        message, message
    reasons = {w.participant_id: w.reason for w in analyst_status(cfg).withdrawn}
    assert where in reasons["p2"], reasons  # what every waiting site reads
    assert f"p2.csv, {where.split(',')[0]}" in reasons["p2"]
    assert str(files.root) not in reasons["p2"] and "/" not in reasons["p2"]
    if bad[2]:
        assert repr(bad[2]) not in reasons["p2"]
    assert _store_state(files.store) == before  # nothing stored, nothing changed


@pytest.mark.parametrize("text, words", [
    ("", "p2.csv: the file is empty"),
    ("\n\n", "p2.csv: the file is empty"),
    (HEADER.rsplit(",", 1)[0] + "\n1,2,0.5,north,yes\n",
     "p2.csv, line 1: the header has no label column 'outcome'"),
    (HEADER.replace("ratio", "area") + "\n",
     "p2.csv, line 1, column 'area': the header names this column twice"),
    (HEADER.replace("region", "regoin") + "\n",
     "p2.csv, line 1, column 'region': the header has no such column"),
    (HEADER.replace(",", ";") + "\n", "p2.csv, line 1: the header is a single field holding ';'"),
])
def test_an_empty_file_or_a_bad_header_withdraws_too(federation, text, words):
    """The file, and the line and column of a header that lacks one (there is no value)."""
    files, configs = federation
    cfg = load_participant_config(configs["p2"])
    files.data["p2"].write_text(text)
    before = _store_state(files.store)
    with pytest.raises(InvalidInputError) as err:
        run_upload(cfg)
    local = words.replace("p2.csv", str(files.data["p2"]))
    assert local in str(err.value), str(err.value)
    reason = {w.participant_id: w.reason for w in analyst_status(cfg).withdrawn}["p2"]
    assert words in reason and str(files.root) not in reason, reason
    assert "/" not in reason.replace("'/'", ""), reason
    assert "record_id" not in reason  # the site's other columns are its own business
    assert _store_state(files.store) == before


def test_a_kit_holding_the_schema_refuses_the_table_before_joining_and_withdraws(federation):
    """With the typed columns in its kit (as provision writes them) the site reads its table
    before it connects, and still tells the others it withdrew."""
    files, configs = federation
    kit = write_toml(files.root / "p2-kit.toml", read_toml(configs["p2"]) | {"schema": SCHEMA})
    cfg = load_participant_config(kit)
    assert cfg.schema == TabularSchema.from_toml(SCHEMA, kit)
    files.data["p2"].parent.mkdir(exist_ok=True)
    files.data["p2"].write_text(_table(12, (10, "region", "West")))
    with pytest.raises(InvalidInputError, match=r"p2.csv, line 10, column 'region': 'West' is "
                       "not one of the declared categories; declared: north, south"):
        run_upload(cfg)
    reason = {w.participant_id: w.reason for w in analyst_status(cfg).withdrawn}["p2"]
    assert reason.startswith("p2.csv, line 10, column 'region': the value is not one of"), reason
    assert "West" not in reason


def test_a_site_or_an_upload_preprocessing_otherwise_is_refused(federation, rng):
    """A kit pinned to another preprocessing digest than the analyst serves (a stale kit)
    refuses to encode and withdraws; an upload declaring another digest (another encoder) is
    refused by the analyst, naming both digests; nothing is stored."""
    files, configs = federation
    cfg = load_participant_config(configs["p2"])
    files.data["p2"].write_text(_table(12))
    served = TabularSchema.from_toml(SCHEMA, configs["p2"])
    stale = TabularSchema.from_toml(SCHEMA | {"column": [
        SCHEMA["column"][0] | {"max": 100.0}, *SCHEMA["column"][1:]]}, configs["p2"])
    before = _store_state(files.store)
    pinned = dataclasses.replace(cfg, preprocessing_sha256=stale.digest().hex())
    with pytest.raises(InvalidInputError, match=r"the analyst serves a preprocessing \(digest "
                       f"{served.digest().hex()[:16]}\\) other than the one p2's config "
                       "agreed to"):
        run_upload(pinned)
    reason = {w.participant_id: w.reason for w in analyst_status(cfg).withdrawn}["p2"]
    assert "other than the one p2's config agreed to" in reason, reason
    arrays = random_upload(rng, 12, served.width, 4 * served.width)
    client = AnalystClient(cfg.analyst, cfg.tls, cfg.server_name, FEDERATION, 30.0)
    with client:
        for declared, shown in ((stale.digest(), stale.digest().hex()[:16]), (b"", "none")):
            spec = bundle_spec(FEDERATION, "aa-igdp", arrays, digests=False,
                               preprocessing_sha256=declared)
            with pytest.raises(InvalidInputError, match=rf"INVALID_ARGUMENT.*preprocessed "
                               rf"differently .*digest {shown}.*the federation's "
                               f"{served.digest().hex()[:16]}"):
                client.send_bundle("upload", spec, arrays)
    assert _store_state(files.store) == before


def test_the_other_sites_stop_waiting_when_a_site_withdraws_and_finish_once_it_is_back(
        tmp_path):
    with _federation(tmp_path) as (files, configs):
        _bad_site_stops_the_others(files, configs)


def _bad_site_stops_the_others(files, configs) -> None:
    files.data["p0"].parent.mkdir(exist_ok=True)
    files.data["p0"].write_text(_table(30))
    # p1 exported its areas in um2 (10^6 of the declared mm2): warned, not refused.
    files.data["p1"].write_text("\n".join(
        ",".join(f"{float(c) * 1e6:g}" if k == 1 and n else c for k, c in enumerate(row.split(",")))
        for n, row in enumerate(_table(30).split("\n"))))
    files.data["p2"].write_text(_table(30, (17, "ratio", "n/a")))
    # p2's kit holds the typed columns, as provision writes them: it finds the bad cell before
    # it connects (the others' kits do not: they read their tables once joined).
    configs = configs | {"p2": write_toml(files.root / "p2-kit.toml",
                                          read_toml(configs["p2"]) | {"schema": SCHEMA})}
    logs = {pid: files.root / f"{pid}.log" for pid in IDS}
    procs = {pid: start(["participant", "upload", "--config", configs[pid]], logs[pid])
             for pid in ("p0", "p1")}
    try:
        assert wait_until(lambda: (files.store / "relay" / "keys" / "p1.pb").exists(), 60)
        procs["p2"] = start(["participant", "upload", "--config", configs["p2"]], logs["p2"])
        assert procs["p2"].wait(60) == 1
        assert [procs[p].wait(60) for p in ("p0", "p1")] == [1, 1]  # stopped, not timed out
    finally:
        for proc in procs.values():
            stop(proc)
    own = logs["p2"].read_text()
    assert f"{files.data['p2']}, line 17, column 'ratio': 'n/a' is not a number" in own
    assert "telling the analyst that p2 withdraws" in own  # found before connecting
    assert "column 'area' [mm2]: 30 of 30 values lie outside the declared range 0 .. 1000 " \
        "(seen 1e+08 .. 8.77e+08, first on line 2): is the export in mm2?" in \
        logs["p1"].read_text()
    for pid in ("p0", "p1"):
        told = next(line for line in logs[pid].read_text().splitlines()
                    if line.startswith("noisyanchor participant: error:"))
        assert "p2 withdrew" in told and "p2.csv, line 17, column 'ratio'" in told, told
        assert "n/a" not in told and str(files.root) not in told
    assert not (files.store / "relay" / "keys" / "p2.pb").exists()
    assert not any((files.store / "uploads").glob("*.bundle"))
    assert "Once p2 run(s) the upload again (that clears the withdrawal), run this one again" \
        in told
    # p2 fixes its cell and joins again (its withdrawal is cleared); the others run again and
    # resume with the exchange keys they kept: the federation completes. p1 fixes its unit too
    # (the analyst's screening would refuse its areas in um2 before alignment:
    # test_e2e_screening.py).
    files.data["p2"].write_text(_table(30))
    files.data["p1"].write_text(_table(30))
    _back_then_the_others(configs, logs)


def _back_then_the_others(configs, logs, while_waiting=lambda: None) -> None:
    """p2 runs again: its withdrawal is cleared while it waits (``while_waiting`` then looks
    at the federation); p0 and p1 run again, and the federation completes."""
    procs = {"p2": start(["participant", "upload", "--config", configs["p2"]], logs["p2"])}
    try:
        cfg = load_participant_config(configs["p2"])
        assert wait_until(lambda: not analyst_status(cfg).withdrawn, 60)
        while_waiting()
        procs |= {pid: start(["participant", "upload", "--config", configs[pid]], logs[pid])
                  for pid in ("p0", "p1")}
        assert {p: procs[p].wait(120) for p in IDS} == dict.fromkeys(IDS, 0), \
            {p: logs[p].read_text()[-400:] for p in IDS}
    finally:
        for proc in procs.values():
            stop(proc)
    assert wait_until(lambda: analyst_status(cfg).state == "done", 60)


def test_a_site_that_withdrew_before_the_dealer_began_clears_it_when_it_runs_again(tmp_path):
    """Regression (issue 34): a site whose export was refused before anyone else ran, run
    again with its table fixed, stopped on its own withdrawal while it waited for the
    dealer's key (its key publication, which cleared it, needs the dealer's), and so would
    every site after it: the message's "run the upload again" led nowhere. Taking part again
    now clears it at once; the dealer and the third site then run, and all finish."""
    with _federation(tmp_path) as (files, configs):
        files.data["p0"].parent.mkdir(exist_ok=True)
        for pid in ("p0", "p1"):
            files.data[pid].write_text(_table(30))
        files.data["p2"].write_text(_table(30).replace(",", ";"))  # another dialect
        cfg = load_participant_config(configs["p2"])
        logs = {pid: files.root / f"{pid}.log" for pid in IDS}
        first = start(["participant", "upload", "--config", configs["p2"]], logs["p2"])
        assert first.wait(60) == 1
        assert "p2" in {w.participant_id for w in analyst_status(cfg).withdrawn}
        files.data["p2"].write_text(_table(30))

        def dealer_not_yet() -> None:  # cleared while p2 waits for the dealer, not yet run
            assert not (files.store / "relay" / "keys" / "p0.pb").exists()

        _back_then_the_others(configs, logs, dealer_not_yet)
        assert "p2 is back (its withdrawal is cleared)" in (files.root / "analyst.log") \
            .read_text()


@pytest.mark.slow  # a whole demo (analyst, sites, predictions, attacks): ~20 s quiet
@pytest.mark.extended
def test_the_demo_runs_on_the_breast_cancer_table_as_its_template_scales_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "noisyanchor", "demo", "--dataset",
                          "breast-cancer", "--participants", "2", "--colluder", "-1", "--seed",
                          "5", "--workdir", tmp_path / "demo", "--json"], capture_output=True,
                         text=True, timeout=600, check=True, env=child_env(), cwd=tmp_path)
    s = json.loads(out.stdout)
    assert s["z_matches_inprocess"] and s["dim"] == 30 and s["anchors"] == 120
    # Logistic regression on the two sites' aligned, publicly scaled records; chance is 0.5.
    assert s["utility"]["balanced_accuracy"] > 0.85, s["utility"]
