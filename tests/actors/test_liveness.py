"""The hang rule and the read lease of :mod:`actors.cluster.liveness`, driven by a
simulated clock (no Ray)."""

from __future__ import annotations

from actors.cluster.liveness import (
    FIRST_ANSWER_WAIT,
    HANG_AFTER,
    MAX_HANG_AFTER,
    MIN_PATIENCE,
    PROBE_EVERY,
    Lease,
    Liveness,
)

STEP = PROBE_EVERY


def run(
    answer_after: callable,  # type: ignore[valid-type]
    until: float,
    supervisor_stalled: tuple[float, float] | None = None,
) -> float | None:
    """Ping every STEP seconds from 0 to *until*; the ping sent at t is answered at
    ``answer_after(t)`` (None: never). The first time the rule says hung, or None.

    While *supervisor_stalled* ``(start, end)`` the supervisor sends nothing and sees
    nothing: answers due then are seen at its end, before it looks."""
    live = Liveness()
    due: list[tuple[float, int]] = []
    t = 0.0
    while t <= until + 1e-9:
        stalled = (
            supervisor_stalled is not None and supervisor_stalled[0] <= t < supervisor_stalled[1]
        )
        if not stalled:
            for at, n in sorted(due):
                if at <= t:
                    live.answered(n, at)
            due = [(at, n) for at, n in due if at > t]
            if live.hung(t):
                return t
            n = live.sent(t)
            reply = answer_after(t)
            if reply is not None:
                due.append((reply, n))
        t = round(t + STEP / 5, 6)
    return None


def test_a_stopped_process_is_hung_about_hang_after_its_first_unanswered_ping() -> None:
    stop = 5.0
    hung = run(lambda t: t + 0.01 if t < stop else None, until=10)
    assert hung is not None
    assert HANG_AFTER <= hung - stop <= HANG_AFTER + 2 * STEP


def test_a_slow_but_live_process_is_never_hung() -> None:
    # A machine getting loaded: answers slow down to 1.5 s each (longer than HANG_AFTER);
    # the pipelined pings keep being answered, and the patience follows the latency.
    assert run(lambda t: t + min(1.5, 0.01 + 0.1 * t), until=30) is None
    # A process held 0.9 s (a slow step that keeps even its ping thread waiting): no hang.
    assert run(lambda t: 2.9 if 2.0 <= t < 2.9 else t + 0.01, until=10) is None


def test_slow_answers_raise_the_threshold_up_to_its_ceiling() -> None:
    quick, slow = Liveness(), Liveness()
    for i in range(10):
        quick.answered(quick.sent(i), i + 0.01)
        slow.answered(slow.sent(i), i + 0.6)
    assert quick.threshold() == HANG_AFTER and quick.patience() == MIN_PATIENCE
    assert HANG_AFTER < slow.threshold() <= MAX_HANG_AFTER
    very_slow = Liveness()
    very_slow.answered(very_slow.sent(0), 30.0)
    assert very_slow.threshold() == MAX_HANG_AFTER
    # Quick answers, but the supervisor's own prober woke 0.3 s late: a loaded machine.
    loaded = Liveness()
    loaded.answered(loaded.sent(0), 0.01)
    loaded.overslept(0.3)
    assert loaded.patience() > MIN_PATIENCE and loaded.threshold() > HANG_AFTER
    # A process that answered slowly then stopped is declared hung within the ceiling.
    stop = 6.0
    hung = run(lambda t: t + 0.6 if t < stop else None, until=12)
    assert hung is not None and hung - stop <= MAX_HANG_AFTER + 0.6 + 2 * STEP


def test_a_stall_of_the_supervisor_is_not_taken_for_a_hang() -> None:
    # The supervisor's own process is starved for 2 s; the primary answers all along.
    assert run(lambda t: t + 0.05, until=10, supervisor_stalled=(3.0, 5.0)) is None


def test_a_process_that_never_answered_is_given_time_to_start() -> None:
    live = Liveness()
    for i in range(40):
        live.sent(i * STEP)
    assert not live.hung(9.0) and live.hung(FIRST_ANSWER_WAIT + 0.5)
    # Started slowly (its first answer after 4 s), then stopped: hung as usual.
    assert run(lambda t: 4.0 if t < 4.0 else (t + 0.01 if t < 6.0 else None), until=10) is not None


def test_a_late_answer_clears_every_earlier_ping() -> None:
    live = Liveness()
    live.answered(live.sent(-1.0), -0.99)
    first = live.sent(0.0)
    numbers = {t: live.sent(t) for t in (0.25, 0.5, 0.75, 1.0)}
    assert live.hung(1.6)
    live.answered(numbers[0.75], 1.6)  # the process ran after 0.75
    assert live.in_flight() == 1 and not live.hung(1.6)
    live.answered(first, 1.7)  # an answer already cleared changes nothing
    assert live.in_flight() == 1


def test_a_lease_lives_from_the_newest_answered_question() -> None:
    lease = Lease(0.5)
    assert not lease.live(0.0)  # never renewed: a read first asks the followers
    lease.renewed(1.0)
    assert lease.live(1.2) and not lease.live(1.5)
    lease.renewed(0.8)  # an older question answered late: no shorter, no longer
    assert lease.live(1.45) and not lease.live(1.5)
    lease.renewed(1.4)
    assert lease.live(1.85)
    lease.lapse()
    assert not lease.live(1.5)
