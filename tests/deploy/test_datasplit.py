"""`noisyanchor data split`: one CSV per site that the reader takes back as it was, stratified
or label-skewed, with held-back records for prediction; nothing overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from noisyanchor import deploy
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
    printed = json.loads(capsys.readouterr().out)
    shares = printed["sites"].values()
    assert list(printed["sites"]) == SITES.split(",")
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
    # Every site's counts are the operator's: beside the sites' folders, in no site's kit.
    assert printed["summary"] == str(tmp_path / "kits" / "split.json")
    assert not list((tmp_path / "kits").glob("*/**/split.json"))
    summary = json.loads((tmp_path / "kits" / "split.json").read_text())
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


def test_existing_tables_are_never_overwritten_and_bad_arguments_refused(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["data", "split", "--dataset", "digits", "--sites", SITES, "--out", out]) == 0
    assert f"every site's counts and paths in {tmp_path / 'out' / 'split.json'}" in \
        capsys.readouterr().out
    before = (tmp_path / "out" / "org-b.csv").read_bytes()
    from noisyanchor.deploy.datasplit import read_source, split_table

    with pytest.raises(AlreadyExistsError, match="refusing to overwrite"):
        split_table(read_source("digits"), SITES.split(","), out, seed=1)
    assert (tmp_path / "out" / "org-b.csv").read_bytes() == before
    with pytest.raises(InvalidInputError, match="at least 2 distinct"):
        split_table(read_source("digits"), ["org-a", "org-a"], str(tmp_path / "x"))
    with pytest.raises(InvalidInputError, match="neither a bundled data set"):
        read_source("mnist")


def test_provision_makes_the_kits_around_the_sites_tables_in_either_order(tmp_path, capsys):
    """Regression (issue 34): provision refused a kits/ holding data split's output ("not empty
    and holds no CA") with no hint of the order. Now the kits are made around the tables (and
    the summary stays beside them, the operator's); a folder holding anything else is refused,
    naming what it accepts; and split after provision still works."""
    project = tmp_path / "federation.toml"
    project.write_text((Path(deploy.__file__).parent / "templates"
                        / "federation-local.toml").read_text())
    kits, early = tmp_path / "kits", tmp_path / "early"
    assert main(["data", "split", "--dataset", "digits", "--sites", SITES, "--out",
                 str(early / "{site}" / "data")]) == 0
    table = (early / "org-b" / "data" / "org-b.csv").read_bytes()
    assert main(["provision", "--project", str(project), "--out", str(early)]) == 0
    assert (early / "org-b" / "data" / "org-b.csv").read_bytes() == table
    assert (early / "org-b" / "org-b.toml").is_file() and (early / "split.json").is_file()
    other = tmp_path / "other"
    (other / "org-z" / "data").mkdir(parents=True)  # a site the project does not name
    capsys.readouterr()
    assert main(["provision", "--project", str(project), "--out", str(other)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{other} holds more than the project's sites' tables (data split's output) and " \
        "no CA" in err
    assert f"holding only 'noisyanchor data split ... --out {other}/{{site}}/data' for the " \
        "project's [[site]] names" in err
    assert main(["provision", "--project", str(project), "--out", str(kits)]) == 0
    assert main(["data", "split", "--dataset", "digits", "--sites", SITES, "--out",
                 str(kits / "{site}" / "data")]) == 0
    assert (kits / "org-a" / "data" / "org-a.csv").is_file() and (kits / "split.json").is_file()
    assert not list(kits.glob("org-*/**/split.json"))


def test_a_file_is_split_into_tables_in_its_own_delimiter(tmp_path):
    """Issue 34: a ';' export with decimal commas was written out comma-separated, its numbers
    quoted ("48,8"): no setting could read the sites' tables back. Each site's table keeps the
    source's delimiter, and reads with [participant] delimiter and decimal as the source does."""
    from noisyanchor.common.tabular import read_table

    rows = [f"{40 + i % 7},{i % 3};{i % 2}" for i in range(60)]
    (tmp_path / "survey.csv").write_text("mass_kg;label\n" + "\n".join(rows) + "\n")
    assert main(["data", "split", "--dataset", str(tmp_path / "survey.csv"), "--delimiter", ";",
                 "--sites", SITES, "--holdout", "0.1", "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "org-a.csv").read_text()
    assert table.startswith("mass_kg;label\n") and '"' not in table
    read = read_table(tmp_path / "out" / "org-a.csv", None, delimiter=";", decimal=",")
    assert read.x.shape[1] == 1 and set(np.round(read.x[:, 0] * 10) % 10) <= {0, 1, 2}
    assert (tmp_path / "out" / "org-a-new.csv").read_text().startswith("mass_kg\n")


def test_provision_refuses_a_schema_the_split_tables_do_not_fit_and_says_the_draft(tmp_path,
                                                                                   capsys):
    """Issue 34: provisioning one's own table with the one-host template's digits schema
    made kits every site would be refused with at its upload (and withdraw); provision
    compares the schema with data split's summary first and says the two commands that fit
    it, writing nothing."""
    rows = [f"{i},{'ab'[i % 2]},{40 + i % 7}.5" for i in range(60)]
    (tmp_path / "survey.csv").write_text("record,species,mass_g\n" + "\n".join(rows) + "\n")
    kits = tmp_path / "kits"
    assert main(["data", "split", "--dataset", str(tmp_path / "survey.csv"), "--label",
                 "species", "--sites", SITES, "--out", str(kits / "{site}" / "data")]) == 0
    template = Path(deploy.__file__).parent / "templates" / "federation-local.toml"
    capsys.readouterr()
    assert main(["provision", "--project", str(template), "--out", str(kits)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{kits / 'split.json'}: the sites' tables have columns 'record', 'species', " \
        "'mass_g' and the label 'species', but the [schema] of " in err
    assert "is plain, whose sites read the label from a column 'label'" in err
    assert f"noisyanchor schema draft --data {kits}/org-a/data/org-a.csv --label species " \
        "--out schema.toml, then provision" in err and "--schema schema.toml" in err
    assert not (kits / "ca").exists()
    draft = tmp_path / "schema.toml"
    draft.write_text('[schema]\nlabel = "species"\nlabel_classes = ["a", "b"]\n'
                     '[[schema.column]]\nname = "mass_kg"\ncenter = 4.0\nscale = 1.0\n')
    assert main(["provision", "--project", str(template), "--schema", str(draft), "--out",
                 str(kits)]) == 1
    assert "declares column(s) 'mass_kg', which they lack" in capsys.readouterr().err
    draft.write_text(draft.read_text().replace("mass_kg", "mass_g"))
    assert main(["provision", "--project", str(template), "--schema", str(draft), "--out",
                 str(kits)]) == 0
    assert f"[schema] from {draft}: 1 column, d_in = 1 encoded; every site's kit pins its " \
        "preprocessing " in capsys.readouterr().out
