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
    from noisyanchor.analyst import edge

    monkeypatch.setattr(edge, "_MAX_REMEMBERED", 10)
    now = [0.0]
    refusals = RefusalLog(limit=1, window=1.0, clock=lambda: now[0])
    for k in range(10):
        refusals.admit(("rpc", "CODE", str(k)))
    now[0] = 5.0
    refusals.admit(("rpc", "CODE", "new"))
    assert len(refusals._seen) == 1
