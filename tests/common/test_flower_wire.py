"""How a refusal crosses the Flower transport (common/flower_wire.py): every project error
class comes back as itself, naming the node; a message Flower could not deliver says so."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from flwr.app import Error

from noisyanchor.common import errors
from noisyanchor.common.flower_wire import ERROR_CODES, refused


@pytest.mark.parametrize("cls", [cls for cls, _ in ERROR_CODES])
def test_each_refusal_comes_back_as_its_own_class(cls):
    code = dict(ERROR_CODES)[cls]
    back = refused(Error(code=code, reason="the reason"), "org-a (node 7)")
    assert type(back) is cls
    assert str(back) == "org-a (node 7): the reason"


def test_codes_are_distinct_and_clear_of_flowers_own():
    codes = [code for _, code in ERROR_CODES]
    assert len(set(codes)) == len(codes) and min(codes) > 10


def test_an_undelivered_message_names_the_node_as_unreachable():
    back = refused(Error(code=5, reason="heartbeat lost"), "org-b (node 9)")
    assert isinstance(back, errors.PreconditionError)
    assert "org-b (node 9) is unreachable (node unavailable" in str(back)
