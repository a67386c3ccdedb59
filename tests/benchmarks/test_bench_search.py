"""The search benchmark compares each cheaper C search's choice with the full search's."""

import json

import pytest

from benchmarks import bench_search

pytestmark = pytest.mark.slow  # digits and breast cancer, four searches each: ~10 s loaded


def test_every_search_is_counted_against_the_full_one(tmp_path):
    out = tmp_path / "search.json"
    bench_search.main(["--seeds", "1", "--out", str(out)])
    tables = json.loads(out.read_text())["tables"]
    assert set(tables) == {"digits", "breast-cancer"}
    for table in tables.values():
        assert table["full"]["same_choice_as_full"] == table["full"]["of"] == 1
        assert {"warm_start", "subsample_0.25", "subsample_0.5"} <= set(table)
        for row in table.values():
            assert row["chosen_c"][0] in json.loads(out.read_text())["grid"]
