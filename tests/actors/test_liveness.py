"""The hang rule and the read lease of :mod:`actors.cluster.liveness`, driven by a
simulated clock (no Ray); the process check a hang waits for, on real processes; and a busy
primary against a stopped one on the session's two-node cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.client.nodes import process_state, read_stat
from actors.cluster.liveness import (
    BUSY,
    BUSY_GRACE,
    CHECK_EVERY,
    FIRST_ANSWER_WAIT,
    GONE,
    HANG_AFTER,
    LEASE,
    LEASE_MARGIN,
    MAX_HANG_AFTER,
    MIN_PATIENCE,
    NO_WITNESS,
    PROBE_EVERY,
    STOPPED,
    UNANSWERED,
    Grants,
    Lease,
    Liveness,
    Suspicion,
    every_follower_vouches,
    replaced_lease_over,
    vouched,
)
from protocol.errors import RequestError
from tests.actors.cluster import RayCluster, placed_directory
from tests.examples import examples

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


def test_a_held_supervisor_looks_before_it_sees_the_answers_that_came_meanwhile() -> None:
    # The prober's real order: woken after its event loop was held, it records how late it
    # woke, then looks; answers that came during the hold are seen only after that look.
    # A loaded machine: each answer takes 0.6 s, so 3 pings are in flight when the hold
    # (2.5 s, past the threshold's ceiling) begins.
    def held(stopped_at: float | None) -> float | None:
        live = Liveness()
        due: list[tuple[float, int]] = []
        t = 0.0
        while t < 12.0:
            if 5.0 < t < 7.5:  # the supervisor's event loop is held: nothing sent or seen
                t = round(t + STEP, 6)
                continue
            if t == 7.5:
                live.overslept(2.5 - STEP)
            elif t > 0:
                live.overslept(0.0)
            if live.hung(t):
                return t
            for at, n in sorted(due):
                if at <= t:
                    live.answered(n, t)
            due = [(at, n) for at, n in due if at > t]
            n = live.sent(t)
            if stopped_at is None or t < stopped_at:
                due.append((t + 0.6, n))
            t = round(t + STEP, 6)
        return None

    assert held(stopped_at=None) is None
    # Stopped during the hold: found hung once the supervisor runs again, within the
    # ceiling (counted from when it could see the pings unanswered again).
    hung = held(stopped_at=6.0)
    assert hung is not None and 7.5 < hung <= 7.5 + MAX_HANG_AFTER + 0.6 + 2 * STEP
    # Stopped before the hold: the hold delays the verdict by no more than itself.
    hung = held(stopped_at=4.0)
    assert hung is not None and hung <= 4.0 + 2.5 + MAX_HANG_AFTER + 0.6 + 2 * STEP


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


# -- the replaced primary's lease, seen from the follower promoted in its place ---------


def test_the_promoted_follower_counts_the_replaced_lease_from_its_own_last_answer() -> None:
    grants = Grants()
    grants.took(3, 10.0)  # the last batch of the primary of epoch 3, answered at 10.0
    grants.answered(4, 10.3)  # fenced at 4: this status vouches for nobody at 3
    over = replaced_lease_over(10.35, grants, 3, every_follower_vouches(1, 1))
    assert over == pytest.approx(10.0 + LEASE + LEASE_MARGIN)
    # acks below the followers: the primary renewed without this follower's answer
    assert replaced_lease_over(10.35, grants, 3, every_follower_vouches(1, 2)) == (
        pytest.approx(10.35 + LEASE + LEASE_MARGIN)
    )
    # no message of that primary taken (a replacement it never reached, a restart)
    assert replaced_lease_over(10.35, grants, 4, True) == pytest.approx(
        10.35 + LEASE + LEASE_MARGIN
    )
    assert replaced_lease_over(10.35, Grants(), 3, True) == pytest.approx(
        10.35 + LEASE + LEASE_MARGIN
    )
    # a later grant than the seal cannot happen (fenced first), but never lengthens the wait
    late = Grants()
    late.took(3, 11.0)
    assert replaced_lease_over(10.35, late, 3, True) == pytest.approx(10.35 + LEASE + LEASE_MARGIN)


def test_a_status_vouches_only_for_the_primary_whose_messages_were_taken() -> None:
    grants = Grants()
    grants.answered(3, 1.0)  # a status before any message of that primary: no grant
    assert grants.at is None
    grants.took(3, 2.0)
    grants.answered(3, 2.5)
    assert (grants.epoch, grants.at) == (3, 2.5)
    grants.took(4, 3.0)  # a newer primary's snapshot: grants to epoch 3 are forgotten
    assert (grants.epoch, grants.at) == (4, 3.0)


def test_a_lease_renews_only_with_every_follower_when_acks_covers_them() -> None:
    assert vouched(2, 2, 2, 2) and not vouched(1, 2, 2, 2)
    assert vouched(1, 1, 1, 1) and not vouched(0, 0, 1, 1)  # acks 0: one answer still
    assert vouched(1, 1, 2, 2)  # acks < followers: any one of them
    # more followers listed than the count (set by hand): every one must answer
    assert not vouched(1, 1, 1, 2) and vouched(2, 1, 1, 2)


@settings(max_examples=examples(400), deadline=None)
@given(
    follower_count=st.integers(1, 3),
    acks_less=st.integers(0, 3),
    questions=st.lists(
        st.tuples(st.floats(0.0, 6.0), st.lists(st.floats(0.001, 0.4), min_size=4, max_size=4)),
        max_size=30,
    ),
    lost=st.one_of(
        st.none(), st.tuples(st.integers(0, 2), st.floats(0.0, 4.0), st.floats(0.0, 1.0))
    ),
    fence_at=st.floats(1.0, 6.0),
    seal_after=st.floats(0.0, 0.5),
    promoted=st.integers(0, 3),
)
def test_the_replaced_primary_serves_no_read_once_the_promoted_follower_may(
    follower_count: int,
    acks_less: int,
    questions: list[tuple[float, list[float]]],
    lost: tuple[int, float, float] | None,
    fence_at: float,
    seal_after: float,
    promoted: int,
) -> None:
    """A primary renews its lease as the replicator does (a question asked at *a*, answered
    by the followers its entry lists then, each after a delay, refused once fenced); one
    follower may be lost (at *d*) and replaced (listed from *d + j*); every follower is
    fenced at *fence_at*, the promoted one sealed after. Whichever live follower is
    promoted, the old lease is over by the moment it may serve (its clock = the primary's:
    the margin is for clock rates only)."""
    acks = max(0, follower_count - acks_less)
    members = list(range(follower_count))
    died: dict[int, float] = {}
    joined: dict[int, float] = {m: -1.0 for m in members}
    replacement = None
    if lost is not None and lost[0] < follower_count:
        died[lost[0]] = lost[1]
        replacement = follower_count
        joined[replacement] = lost[1] + lost[2]  # listed from then on, in the lost one's place

    def listed_at(t: float) -> list[int]:
        if replacement is not None and t >= joined[replacement]:
            return [m for m in members if m not in died] + [replacement]
        return members  # a lost follower stays listed until its replacement is

    grants = {m: Grants() for m in joined}
    lease = Lease()
    answers = []
    for asked, delays in sorted(questions):
        if asked >= fence_at:
            continue  # a fenced follower answers no question of the old primary
        listed = listed_at(asked)
        got = 0
        for m in listed:
            at = asked + delays[m]
            if at >= fence_at or (m in died and at >= died[m]):
                continue  # fenced, or lost, before it answered
            answers.append((at, m))
            got += 1
        if vouched(got, acks, follower_count, len(listed)):
            lease.renewed(asked)
    for at, m in sorted(answers):
        grants[m].took(7, at)
    for m in grants:
        grants[m].answered(8, fence_at)  # the fence's answer, at the new epoch
    alive = [m for m in joined if m not in died]
    chosen = alive[promoted % len(alive)]
    sealed = fence_at + seal_after
    over = replaced_lease_over(
        sealed, grants[chosen], 7, every_follower_vouches(acks, follower_count)
    )
    assert not lease.live(over - LEASE_MARGIN + 1e-9)  # 1 ns: the sums' rounding
    assert over <= sealed + LEASE + LEASE_MARGIN


# -- before a hang is declared: what the primary's node says of its process -------------


def test_a_suspected_primary_is_hung_at_once_only_when_its_node_cannot_vouch_for_it() -> None:
    for state, why in (
        ("T", STOPPED),
        ("t", STOPPED),
        ("Z", GONE),
        (GONE, GONE),
        (UNANSWERED, UNANSWERED),
        (NO_WITNESS, NO_WITNESS),
    ):
        s = Suspicion(10.0)
        assert s.due(10.0) and s.hung(10.0) is None  # not asked yet
        s.asking(10.0)
        s.witnessed(state)
        assert s.hung(10.1) == why, state


def test_a_running_primary_gets_more_time_but_no_more_than_the_grace() -> None:
    s = Suspicion(10.0)
    s.asking(10.0)
    assert not s.due(10.0 + CHECK_EVERY / 2) and s.due(10.0 + CHECK_EVERY)
    for i, state in enumerate("RSDRS"):
        s.witnessed(state, cpu=1.0 + i)
        assert s.hung(10.0 + i) is None
    assert s.cpu_advanced() == pytest.approx(4.0)
    assert s.hung(10.0 + BUSY_GRACE - 0.01) is None
    assert s.hung(10.0 + BUSY_GRACE) == BUSY  # runs, never answers: replaced all the same
    s.witnessed("T")  # stopped meanwhile: at once
    s2 = Suspicion(0.0)
    s2.witnessed("R", cpu=3.0)
    s2.witnessed("T", cpu=3.0)
    assert s2.hung(1.0) == STOPPED


def test_the_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    tail = " 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 4 0"
    assert read_stat("4242 (python3)" + " S" + tail) == ("S", 200)
    assert read_stat("4242 (a (b) c) )" + " T" + tail) == ("T", 200)
    for bad in ("", "4242 python3 S 1 2", "4242 (python3) S 1 2", "4242 (x) SS" + tail):
        with pytest.raises(ValueError):
            read_stat(bad)


def test_the_process_check_tells_a_stopped_process_from_a_running_one() -> None:
    """On real processes: a child stopped with SIGSTOP reads ``T``; resumed and spinning it
    reads neither stopped nor gone and its CPU time advances; once reaped it is gone."""
    state, cpu = process_state(os.getpid()) or ("?", 0.0)
    assert state in "RS" and cpu > 0
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while (process_state(child.pid) or ("?",))[0] != "T":
            assert time.monotonic() < deadline, process_state(child.pid)
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGCONT)
        first = process_state(child.pid)
        while (now := process_state(child.pid)) is not None and now[1] <= (first or now)[1]:
            assert time.monotonic() < deadline, now
            time.sleep(0.01)
        assert now is not None and now[0] not in "TtZX"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None
    for bad in (0, -1, True, "1", 1.5, None):
        with pytest.raises(RequestError) as e:
            process_state(bad)
        assert e.value.code == "bad_argument"


# -- on the session's two-node cluster ---------------------------------------------


@pytest.fixture
def roots(ray_cluster: RayCluster, namespace: str, tmp_path: Path) -> Iterator[Any]:
    """This test's directory (its own namespace), node roots under tmp_path; stopped after,
    with every actor of the namespace."""
    with placed_directory(ray_cluster, namespace, tmp_path) as d:
        yield d


BUSY_FOR = 6.0
"""Seconds the primary's ping thread is held (far past the hang threshold, within
:data:`~actors.cluster.liveness.BUSY_GRACE`)."""


def _spin(actor: Any, seconds: float) -> int:
    """Run in the primary's ``liveness`` thread (the one that answers its pings): CPU-bound
    Python for *seconds*, so every ping waits behind it while the process runs."""
    del actor
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
    return n


def test_a_busy_primary_is_given_time_and_a_stopped_one_is_replaced(
    roots: Any, ray_cluster: RayCluster, namespace: str
) -> None:
    """A replicated primary on the second node (the directory is on this process's node, so
    the supervisor asks an actor running on the primary's node — its idle spare): its ping
    thread held by CPU-bound work for 6 s, far past the hang threshold, misses every ping
    and is not replaced (its node says it runs); stopped with SIGSTOP, it is replaced, the
    promotion's record saying its node found it stopped."""
    import ray

    from actors.cluster.placing import place
    from actors.cluster.spares import is_spare
    from actors.server.connect import LIVENESS_GROUP
    from tests.actors.test_failover import _until

    node = ray_cluster.node2_id
    handle = place("busy", followers=1, placement=f"node:{node}", namespace=namespace)
    entry = roots.get("busy")
    assert entry.primary.node_id == node
    primary = ray.get_actor(entry.primary.actor, namespace=namespace)
    pid = int(str(ray.get(primary.pid.remote(), timeout=30)))

    def ready_spare() -> bool:
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a["namespace"] == namespace and is_spare(a["name"]) and node in a["name"]:
                try:
                    ray.get(ray.get_actor(a["name"], namespace=namespace).pid.remote(), timeout=1)
                    return True
                except Exception:
                    continue
        return False

    _until("an idle spare on the primary's node", ready_spare)
    time.sleep(1.0)  # the supervisor's pool has seen it answer
    assert handle.submit("(context-tx (base-version 0) (derive a (i 1)))").committed
    spin = primary.__ray_call__.options(concurrency_group=LIVENESS_GROUP)
    assert ray.get(spin.remote(_spin, BUSY_FOR), timeout=60) > 0
    time.sleep(1.0)  # its pings answered again, past the threshold
    assert roots.get("busy").epoch == 0, ("a busy primary was replaced", roots.failovers())
    assert roots.failovers() == []
    os.kill(pid, signal.SIGSTOP)
    try:
        _until("the stopped primary replaced", lambda: roots.get("busy").epoch >= 1)
    finally:
        os.kill(pid, signal.SIGCONT)
    # (the entry moves to epoch 1 before the promoted follower serves and it is recorded)
    (failover,) = _until("the promotion's record", roots.failovers)
    # replaced because its node found it stopped, not after the grace a running one gets
    assert (failover["cause"], failover["process"]) == ("hung", STOPPED), failover
