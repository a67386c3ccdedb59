"""`noisyanchor data split`: one CSV per site that the reader takes back as it was, stratified
or label-skewed, with held-back records for prediction; nothing overwritten."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisyanchor.cli import main
from noisyanchor.common.errors import AlreadyExistsError, InvalidInputError
from noisyanchor.common.schema import RecordSchema
from noisyanchor.experiments.datasets import table_schema
from noisyanchor.participant.data import load_local_data

SITES = "org-a,org-b,org-c"


def test_a_bundled_table_is_split_into_site_tables_the_loader_reads(tmp_path, capsys):
    out = tmp_path / "kits" / "{site}" / "data"
    assert main(["data", "split", "--dataset", "breast-cancer", "--sites", SITES, "--out",
                 str(out), "--holdout", "0.1", "--json"]) == 0
    shares = json.loads(capsys.readouterr().out)
    schema = RecordSchema.typed(table_schema("breast-cancer"))
    total = 0
    for share in shares:
        data = load_local_data(share["table"], schema=schema)
        assert data.x.shape == (share["records"], 30)
        assert set(share["labels"]) == {"benign", "malignant"}  # stratified: both everywhere
        new = load_local_data(share["new"], schema=schema, require_labels=False)
        assert new.labels is None and len(new.x) == share["held_back"] > 0
        labels = (tmp_path / share["new_labels"]).read_text().splitlines()
        assert labels[0] == "diagnosis" and len(labels) == share["held_back"] + 1
        total += share["records"] + share["held_back"]
    assert total == 569
    summary = json.loads((tmp_path / "kits" / "org-a" / "data" / "split.json").read_text())
    assert summary["source"] == "breast-cancer" and set(summary["sites"]) == set(SITES.split(","))


def test_a_skewed_split_of_the_operators_file_keeps_its_cells(tmp_path, rng):
    rows = [f"r{i},{rng.choice(['north', 'south'])},{'' if i % 7 == 0 else i * 1.5},"
            f"{['a', 'b', 'c'][i % 3]}" for i in range(90)]
    source = tmp_path / "export.csv"
    source.write_text("id,region,area,outcome\n" + "\n".join(rows) + "\n")
    assert main(["data", "split", "--dataset", str(source), "--sites", SITES, "--out",
                 str(tmp_path / "out"), "--alpha", "0.1", "--label", "outcome",
                 "--seed", "3"]) == 0
    got = []
    per_site = []
    for site in SITES.split(","):
        lines = (tmp_path / "out" / f"{site}.csv").read_text().splitlines()
        assert lines[0] == "id,region,area,outcome"
        got += lines[1:]
        per_site.append([line.rsplit(",", 1)[1] for line in lines[1:]])
    assert sorted(got) == sorted(rows)  # every record once, cells as written
    # alpha = 0.1: each site is dominated by few classes (stratified would give 1/3 each).
    shares = [max(np.unique(s, return_counts=True)[1]) / len(s) for s in per_site]
    assert max(shares) > 0.6


def test_existing_tables_are_never_overwritten_and_bad_arguments_refused(tmp_path):
    out = str(tmp_path / "out")
    assert main(["data", "split", "--dataset", "digits", "--sites", SITES, "--out", out]) == 0
    before = (tmp_path / "out" / "org-b.csv").read_bytes()
    from noisyanchor.deploy.datasplit import read_source, split_table

    with pytest.raises(AlreadyExistsError, match="refusing to overwrite"):
        split_table(read_source("digits"), SITES.split(","), out, seed=1)
    assert (tmp_path / "out" / "org-b.csv").read_bytes() == before
    with pytest.raises(InvalidInputError, match="at least 2 distinct"):
        split_table(read_source("digits"), ["org-a", "org-a"], str(tmp_path / "x"))
    with pytest.raises(InvalidInputError, match="neither a bundled data set"):
        read_source("mnist")
