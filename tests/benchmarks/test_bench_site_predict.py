"""The site-predict benchmark's parts that need no federation: its tables and its ratios."""

from __future__ import annotations

import numpy as np

from benchmarks import bench_site_predict as bench


def test_the_tables_of_new_records_have_the_federations_columns(tmp_path):
    path = bench.write_table(tmp_path / "new.csv", 7, np.random.default_rng(0), labels=False)
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == bench.NAMES and len(lines) == 8
    assert len(lines[1].split(",")) == bench.D


def test_the_ratios_compare_sizes_and_code_versions():
    rows = [{"code": code, "case": case, "records": n, "peak_rss_mib": mib}
            for code, case, n, mib in (("this tree", "first predict", 10, 90.0),
                                       ("this tree", "gain kept", 10, 90.0),
                                       ("this tree", "gain kept", 1000, 99.0),
                                       ("baseline", "first predict", 10, 180.0),
                                       ("baseline", "gain kept", 10, 80.0),
                                       ("baseline", "gain kept", 1000, 800.0))]
    ratios = bench.summarise(rows, (10, 1000))
    assert ratios["largest_over_smallest"] == {"this tree": 1.1, "baseline": 10.0}
    assert ratios["this_tree_largest_over_baseline_smallest"] == 99.0 / 80.0
