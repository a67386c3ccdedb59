"""The analyst's refusal log is bounded per distinct refusal (a client repeating one refused
call cannot fill the disk), and what it leaves out is counted."""

from noisyanchor.analyst.edge import RefusalLog


def test_each_refusal_is_logged_up_to_the_limit_per_window_and_the_rest_counted():
    now = [0.0]
    refusals = RefusalLog(limit=3, window=60.0, clock=lambda: now[0])
    key, other = ("Upload", "PERMISSION_DENIED", "'o1' is not a participant"), ("Status", "X", "y")
    assert [refusals.admit(key) for _ in range(10)] == [(k, 0) for k in range(1, 11)]
    assert refusals.admit(other) == (1, 0)  # counted on its own
    now[0] = 59.9
    assert refusals.admit(key) == (11, 0)  # the same window
    now[0] = 60.0
    assert refusals.admit(key) == (1, 8)  # a new window: 8 of 11 went unlogged
    assert refusals.admit(key) == (2, 0)
    now[0] = 200.0
    assert refusals.admit(key) == (1, 0)  # 2 seen, both logged


def test_refusals_of_ended_windows_are_forgotten_when_there_are_many(monkeypatch):
    from noisyanchor.analyst.core import refusal_log

    monkeypatch.setattr(refusal_log, "_MAX_REMEMBERED", 10)
    now = [0.0]
    refusals = RefusalLog(limit=1, window=1.0, clock=lambda: now[0])
    for k in range(10):
        refusals.admit(("rpc", "CODE", str(k)))
    now[0] = 5.0
    refusals.admit(("rpc", "CODE", "new"))
    assert len(refusals._seen) == 1


def test_refusals_are_counted_per_caller_whatever_their_text(caplog):
    import grpc

    from noisyanchor.analyst import edge
    from noisyanchor.common.errors import PermissionDeniedError

    edge._refusals = RefusalLog()
    with caplog.at_level("WARNING", logger="noisyanchor.analyst.edge"):
        for k in range(50):  # each message different, as an echoed id would make it
            edge.log_refusal("Status", grpc.StatusCode.PERMISSION_DENIED,
                             PermissionDeniedError(f"not {'x' * 10_000}{k}"), "p9")
        edge.log_refusal("Status", grpc.StatusCode.PERMISSION_DENIED,
                         PermissionDeniedError("other caller"), "p8")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == edge.REFUSALS_LOGGED + 1
    assert all(len(line.encode()) <= edge.MAX_STATUS_BYTES + 200 for line in lines)


def test_request_ids_are_checked_without_echo_and_other_strings_cut():
    import pytest

    from noisyanchor.analyst.edge import MAX_FIELD_BYTES, bound_request
    from noisyanchor.common.errors import InvalidInputError
    from noisyanchor.protos.v1 import analyst_pb2 as pb

    long_id = "p" * 3_000_000
    with pytest.raises(InvalidInputError, match=r"SiteModelRequest.participant_id is not an id "
                       r"\(3000000 characters") as refused:
        bound_request(pb.SiteModelRequest(federation_id="f", participant_id=long_id))
    assert len(str(refused.value)) < 200
    with pytest.raises(InvalidInputError, match=r"StatusRequest\.federation_id is not an id"):
        bound_request(pb.StatusRequest(federation_id="f\x1b[2J"))
    nested = pb.PostSealedRequest(federation_id="f")
    nested.shares.add(recipient_id="r/../x")
    with pytest.raises(InvalidInputError, match=r"SealedShare\.recipient_id"):
        bound_request(nested)
    request = pb.WithdrawRequest(federation_id="f", reason="\u00e9" * 3_000_000)
    bound_request(request)
    assert request.reason == "\u00e9" * (MAX_FIELD_BYTES // 2)
    fine = pb.StatusRequest(federation_id="pilot-2026")
    bound_request(fine)
    assert fine.federation_id == "pilot-2026"


def test_a_remote_caller_is_never_told_a_local_absolute_path():
    from noisyanchor.analyst.edge import remote_text
    from noisyanchor.common.errors import IntegrityError

    err = IntegrityError("/srv/na/store/result/z.npy does not match (see '/srv/na/store/x/') "
                         "at 2 bytes/s, path /noisy")
    text = remote_text(err)
    assert "/srv" not in text and "<analyst>/result/z.npy does not match" in text
    assert "'<analyst>/store/x'" in text and "bytes/s" in text and "/noisy" in text
