"""The federation's record schema and declared parameters: what does not fit is refused with a
message naming both sides."""

import numpy as np
import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.schema import RecordSchema, check_declared


def test_records_that_fit_pass_and_a_wrong_width_names_both_counts():
    schema = RecordSchema(4, "float64", ("a", "b", "c", "d"))
    x = np.zeros((3, 4))
    schema.check(x, ("a", "b", "c", "d"), who="org-c's data", federation="pilot")
    schema.check(x, None, who="org-c's data", federation="pilot")  # .npy: no names to check
    with pytest.raises(InvalidInputError, match=r"org-c's data has 3 feature columns but "
                                                r"federation 'pilot' declares 4 float64"):
        schema.check(np.zeros((3, 3)), None, who="org-c's data", federation="pilot")


def test_names_dtype_and_range_are_checked():
    names = RecordSchema(2, "float64", ("age", "income"))
    with pytest.raises(InvalidInputError, match="column 1: 'salary' vs 'income'"):
        names.check(np.zeros((1, 2)), ("age", "salary"), who="d", federation="f")
    with pytest.raises(InvalidInputError, match="non-integer values"):
        RecordSchema(2, "int64").check(np.array([[1.0, 2.5]]), None, who="d", federation="f")
    RecordSchema(2, "int64").check(np.array([[1.0, 2.0]]), None, who="d", federation="f")
    with pytest.raises(InvalidInputError, match="beyond float32"):
        RecordSchema(1, "float32").check(np.array([[1e300]]), None, who="d", federation="f")


@pytest.mark.parametrize("kwargs, match", [
    ({"features": 0}, "at least 1 feature"), ({"features": 2, "dtype": "str"}, "dtype"),
    ({"features": 2, "feature_names": ("a",)}, "names 1 features"),
    ({"features": 2, "feature_names": ("a", "a")}, "distinct"),
])
def test_bad_schemas_are_refused(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        RecordSchema(**kwargs)


def test_declared_parameters_that_differ_are_all_named_with_both_values():
    declared = {"method": "aa-igdp-an", "v": 0.02, "anchors": 64, "dim": None}
    own = {"method": "aa-igdp-an", "v": 0.05, "anchors": 32, "dim": 16}
    with pytest.raises(InvalidInputError) as err:
        check_declared(declared, own, who="org-b's config", analyst="the analyst")
    assert "anchors = 32 in org-b's config, 64 at the analyst" in str(err.value)
    assert "v = 0.05 in org-b's config, 0.02 at the analyst" in str(err.value)
    assert "dim" not in str(err.value)  # not declared: not compared
    check_declared(declared, declared | {"v": 0.02 + 1e-18}, who="x", analyst="y")
