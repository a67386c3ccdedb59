"""Site ids are unique as names, not as byte strings (issue 30, item 6): equal after Unicode
NFKC and case folding is the same site."""

import pytest

from noisyanchor.common.errors import InvalidInputError
from noisyanchor.common.tomlconfig import check_distinct_ids, id_key
from noisyanchor.deploy.certs import check_names


@pytest.mark.parametrize("ids", [["org-a", "Org-A"], ["site1", "SITE1"], ["a", "b", "B"],
                                 ["ANALYST"]])
def test_ids_that_differ_only_in_case_are_refused_naming_both(ids):
    with pytest.raises(InvalidInputError, match="are the same name"):
        check_names(ids if len(ids) > 1 else ["org-a", *ids])


def test_the_key_folds_case_and_compatibility_forms():
    assert id_key("Org-A") == id_key("org-a") == id_key("\uff2frg-a")  # full-width O
    check_distinct_ids(["org-a", "org-b"], "sites")
    check_names(["org-a", "org-b"])
