"""When is a replicated context's primary hung, and may it still serve reads? Pure rules.

:class:`Lease` is the primary's read lease (below). :class:`Liveness` judges pings: the
supervisor (:mod:`actors.cluster.failover`) pings each replicated primary every
:data:`PROBE_EVERY` seconds without waiting for the previous answer, and feeds every
ping sent and every answer got (with the time, from the caller's clock) to one
:class:`Liveness` per primary. The rule:

* an answer to a ping proves the process ran after that ping was sent: every ping sent
  before it stops counting, answered or not (a late answer is life, not a hang);
* a ping counts as **missed** once it has been unanswered for the *patience*: twice the
  slowest of the recent answers (:data:`LATENCY_WINDOW` of them), or :data:`LAG_FACTOR`
  times the supervisor's own recent oversleep if more (its process delayed as every
  process of a loaded machine is), at least :data:`MIN_PATIENCE`, at most what keeps the
  whole rule within :data:`MAX_HANG_AFTER`;
* the primary is **hung** once :data:`MISSES` consecutive pings are missed and the
  oldest of them was sent at least the *threshold* ago: :data:`HANG_AFTER`, raised to
  ``patience + (MISSES - 1) * PROBE_EVERY`` when recent answers were slow, and
  :data:`FIRST_ANSWER_WAIT` until the primary has answered once (it may be starting).

So a stopped process (SIGSTOP, a long GC pause, a starved VM) is declared hung about
:data:`HANG_AFTER` after the first ping it did not answer, on an idle machine; a
process that is only slow keeps answering its pipelined pings and is never declared
hung, and on a loaded machine, where every answer is slower, the threshold grows with
the observed latency up to :data:`MAX_HANG_AFTER`. A stall of the supervisor itself
(its process starved, its event loop held) is not taken for a hang of the primary: it
sends no pings during the stall, and the time it did not run is not counted against the
pings already in flight (:meth:`Liveness.overslept`) — their answers, come during the
stall, wait in its event loop behind the prober's next look. The bounds above are thus
in time the supervisor runs.

Missed pings alone do not tell a stopped process from a running one whose answers are
late (a busy process on a loaded machine). So once the rule says hung, the supervisor asks
something on the primary's node what its process is doing (:class:`Suspicion`): the state
in ``/proc/<pid>/stat`` (:func:`actors.client.nodes.process_state`). Stopped (``T``:
SIGSTOP, as a pause is), gone, or no answer from the node within :data:`WITNESS_WAIT` (the
node itself starved or cut off), or nothing there to ask: hung at once. Running (``R``,
``S``, ``D`` …): it is given more time, asked again every :data:`CHECK_EVERY` seconds, and
declared hung anyway :data:`BUSY_GRACE` seconds after the rule first said so (a process
that runs but never answers again — a deadlock — is still replaced).

No clock, thread or I/O here: times are passed in (seconds, one monotonic clock).
"""

from __future__ import annotations

from collections import deque

__all__ = [
    "BUSY",
    "BUSY_GRACE",
    "CHECK_EVERY",
    "HANG_AFTER",
    "LAG_FACTOR",
    "LATENCY_WINDOW",
    "LEASE",
    "LEASE_MARGIN",
    "FIRST_ANSWER_WAIT",
    "GONE",
    "MAX_HANG_AFTER",
    "MIN_PATIENCE",
    "MISSES",
    "NO_WITNESS",
    "PROBE_EVERY",
    "STOPPED",
    "UNANSWERED",
    "WITNESS_WAIT",
    "Grants",
    "Lease",
    "Liveness",
    "Suspicion",
    "every_follower_vouches",
    "replaced_lease_over",
    "vouched",
]

PROBE_EVERY = 0.25
"""Seconds between two pings of one primary."""
HANG_AFTER = 1.25
"""Seconds from the first missed ping to a hang, when answers are quick."""
MAX_HANG_AFTER = 2.0
"""The most the threshold grows to when answers are slow (the aim: a paused primary is
replaced and serving again within 3 s)."""
MIN_PATIENCE = 0.75
"""Seconds a ping waits for its answer before it counts as missed, at least."""
LAG_FACTOR = 4.0
"""The patience is at least this many times the supervisor's own recent oversleep (how
late its prober woke up: a loaded machine delays every answer as it delays that)."""
MISSES = 3
"""Consecutive missed pings that make a hang."""
LATENCY_WINDOW = 16
"""How many recent answers the patience is computed from."""
FIRST_ANSWER_WAIT = 10.0
"""The threshold until the primary has answered once: a process still starting (its
constructor opening the store, on a loaded machine) answers nothing yet."""


BUSY_GRACE = 10.0
"""Seconds a primary whose process runs (found so on its node) may go on missing its pings,
from the moment the rule first said hung, before it is declared hung anyway: the bound for
a process that runs but never answers again (a deadlock, a store stuck in ``D``)."""
WITNESS_WAIT = 2.0
"""Seconds the supervisor waits for the primary's node to say what its process is doing
(no answer by then: hung, as a node starved or cut off answers nothing either)."""
CHECK_EVERY = 0.5
"""Seconds between two questions to the primary's node while it is given more time."""

STOPPED = "stopped"
"""The process is stopped (``T``/``t`` in ``/proc/<pid>/stat``: SIGSTOP, a debugger)."""
GONE = "gone"
"""The process is dead (``Z``/``X``) or its node has no such process."""
UNANSWERED = "unanswered"
"""Nothing on the node answered within :data:`WITNESS_WAIT`."""
NO_WITNESS = "no witness"
"""Nothing runs on the node to ask (no spare, no other member), or the pid is not known."""
BUSY = "busy"
"""The process runs but missed its pings for :data:`BUSY_GRACE` seconds."""


class Suspicion:
    """A primary the ping rule (:class:`Liveness`) says is hung, while its node is asked what
    its process is doing: :meth:`witnessed` records each answer, :meth:`hung` says why the
    primary is hung, or None while it is given more time (see the module doc)."""

    def __init__(self, since: float) -> None:
        self.since = since
        """When the rule first said hung."""
        self.asked_at: float | None = None
        self.state: str | None = None
        """The last answer: a ``/proc`` state letter, or :data:`GONE`, :data:`UNANSWERED`,
        :data:`NO_WITNESS`; None before the first."""
        self.cpu: list[float] = []
        """The process's CPU seconds at each answer that gave them."""

    def due(self, now: float) -> bool:
        """Whether to ask the node (again) now."""
        return self.asked_at is None or now - self.asked_at >= CHECK_EVERY

    def asking(self, now: float) -> None:
        self.asked_at = now

    def witnessed(self, state: str, cpu: float | None = None) -> None:
        """The node answered *state* (a ``/proc`` state letter, or one of :data:`GONE`,
        :data:`UNANSWERED`, :data:`NO_WITNESS`), with the process's CPU seconds if known."""
        self.state = state
        if cpu is not None:
            self.cpu.append(cpu)

    def cpu_advanced(self) -> float:
        """CPU seconds the process used between the first and the last answer."""
        return self.cpu[-1] - self.cpu[0] if self.cpu else 0.0

    def hung(self, now: float) -> str | None:
        """Why the primary is hung (:data:`STOPPED`, :data:`GONE`, :data:`UNANSWERED`,
        :data:`NO_WITNESS`, :data:`BUSY`), or None while it is given more time (not asked
        yet, or found running for less than :data:`BUSY_GRACE`)."""
        state = self.state
        if state in ("T", "t"):
            return STOPPED
        if state in ("Z", "X", GONE):
            return GONE
        if state in (UNANSWERED, NO_WITNESS):
            return state
        if now - self.since >= BUSY_GRACE:
            return BUSY
        return None


class Liveness:
    """The pings of one primary in flight, and the recent answers' latency."""

    def __init__(self) -> None:
        self._pending: dict[int, float] = {}
        """Pings not answered yet, by number: when each was sent."""
        self._next = 0
        self._latency: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._lag: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def overslept(self, lag: float) -> None:
        """Record that the prober woke *lag* seconds later than it asked to (its own
        process starved or its event loop held: the machine is loaded).

        Those seconds are not counted against the pings in flight: the supervisor saw no
        answer while it did not run, and the answers that came meanwhile wait in its event
        loop behind the prober's next look. So every unanswered ping is taken as sent *lag*
        seconds later than it was (a stall of the supervisor delays a hang's detection by
        the stall, and is never taken for one)."""
        lag = max(0.0, lag)
        self._lag.append(lag)
        for number in self._pending:
            self._pending[number] += lag

    def sent(self, now: float) -> int:
        """Record a ping sent at *now*; its number, to give to :meth:`answered`."""
        number = self._next
        self._next += 1
        self._pending[number] = now
        return number

    def answered(self, number: int, now: float) -> None:
        """Record the answer to ping *number* got at *now*: it and every earlier ping are
        cleared."""
        at = self._pending.get(number)
        if at is None:
            return  # already cleared by a later ping's answer
        self._latency.append(max(0.0, now - at))
        for n in [n for n in self._pending if n <= number]:
            del self._pending[n]

    def patience(self) -> float:
        """Seconds a ping may stay unanswered before it counts as missed."""
        slowest = max(self._latency, default=0.0)
        lag = max(self._lag, default=0.0)
        ceiling = MAX_HANG_AFTER - (MISSES - 1) * PROBE_EVERY
        return min(max(MIN_PATIENCE, 2 * slowest, LAG_FACTOR * lag), ceiling)

    def threshold(self) -> float:
        """Seconds from the oldest missed ping to a hang (:data:`FIRST_ANSWER_WAIT` until
        the first answer)."""
        if not self._latency:
            return FIRST_ANSWER_WAIT
        return min(MAX_HANG_AFTER, max(HANG_AFTER, self.patience() + (MISSES - 1) * PROBE_EVERY))

    def missed(self, now: float) -> list[float]:
        """When each missed ping (unanswered for the patience) was sent, oldest first."""
        patience = self.patience()
        return sorted(at for at in self._pending.values() if now - at >= patience)

    def hung(self, now: float) -> bool:
        """True once :data:`MISSES` pings are missed and the oldest was sent at least the
        :meth:`threshold` ago."""
        missed = self.missed(now)
        return len(missed) >= MISSES and now - missed[0] >= self.threshold()

    def in_flight(self) -> int:
        """How many pings are unanswered."""
        return len(self._pending)


LEASE = 0.5
"""Seconds a replicated primary may serve reads after the followers last confirmed, by
answering it, that no newer epoch existed (measured from when it asked)."""
LEASE_MARGIN = 0.1
"""Seconds a promoted follower waits beyond :data:`LEASE` (clock rates of two processes
differ a little; on one machine they are the same clock)."""


class Lease:
    """A primary's read lease: live until :data:`LEASE` seconds after the newest moment
    at which it asked the followers and enough of them answered as followers of its epoch.

    A follower fenced at a newer epoch no longer answers so, and a promoted follower
    serves only :data:`LEASE` + :data:`LEASE_MARGIN` seconds after every follower was
    fenced; so the old primary's lease has expired before the new primary acknowledges
    anything, and a read it serves under a live lease misses no acknowledged commit.
    """

    def __init__(self, duration: float = LEASE) -> None:
        self.duration = duration
        self._until: float | None = None

    def renewed(self, asked_at: float) -> None:
        """The followers answered a question asked at *asked_at*: live until then +
        the duration (never shortened by an older answer)."""
        until = asked_at + self.duration
        if self._until is None or until > self._until:
            self._until = until

    def live(self, now: float) -> bool:
        """Whether a read may be served at *now*."""
        return self._until is not None and now < self._until

    def lapse(self) -> None:
        """End the lease now (this primary learnt it was replaced)."""
        self._until = None


def every_follower_vouches(acks: int, follower_count: int) -> bool:
    """Whether every renewal of a primary's read lease needs an answer of every follower it
    ships to: it needs ``max(1, acks)`` answers from the followers it holds, and it holds at
    most *follower_count* (the entry's followers)."""
    return max(1, acks) >= follower_count


def vouched(got: int, acks: int, follower_count: int, followers: int) -> bool:
    """Whether *got* distinct followers, each answering as a follower of the primary's epoch
    a question asked at one moment, renew its read lease from that moment: ``max(1, acks)``
    of them, and all of the *followers* its entry lists when :func:`every_follower_vouches`
    (so then each of them answered every renewal)."""
    if got < max(1, acks):
        return False
    return not every_follower_vouches(acks, follower_count) or got >= followers


class Grants:
    """What one follower knows of the leases it granted: when it last answered, as a
    follower of the epoch whose batches it holds, a call a primary counts toward its read
    lease (a batch, a catch-up or a snapshot taken, a ``status``), and which epoch's primary
    it took such a message from last (:meth:`took` for a batch, a catch-up or a snapshot;
    :meth:`answered` for any answer, ``status`` included). On the follower's own monotonic
    clock, which a restart loses (then nothing is known and the promotion waits from the
    seal)."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        """The epoch of the primary whose batch, catch-up or snapshot this follower took
        last."""
        self.at: float | None = None
        """When it last answered as a follower of :attr:`epoch`."""

    def took(self, epoch: int, now: float) -> None:
        """A message of the primary of *epoch* was taken and answered at *now*."""
        if self.epoch != epoch:
            self.epoch, self.at = epoch, None
        self.answered(epoch, now)

    def answered(self, epoch: int, now: float) -> None:
        """A call was answered at *now* as a follower fenced at *epoch* (a status): a grant
        only for the primary of :attr:`epoch`."""
        if epoch == self.epoch and (self.at is None or now > self.at):
            self.at = now


def replaced_lease_over(
    sealed_at: float, grants: Grants, replaced_epoch: int, every_vouches: bool
) -> float:
    """When (on the promoted follower's clock) the read lease of the primary of
    *replaced_epoch* has lapsed, so the promoted follower may serve: :data:`LEASE` +
    :data:`LEASE_MARGIN` after the last moment that primary could have renewed it.

    That moment is the seal (*sealed_at*: every follower was fenced before it, and a fenced
    follower renews nothing). It is this follower's own last grant instead, when earlier,
    if every renewal needed this follower's answer: *every_vouches*
    (:func:`every_follower_vouches`) and this follower took a message of that primary
    (*grants* at *replaced_epoch*), so it was among the followers the primary asks. A
    renewal asked before that primary first sent to this follower was asked before this
    follower's first answer to it; one asked after needed this follower's answer, given
    after it was asked. Either way it was asked before ``grants.at``, and a lease runs
    :data:`LEASE` from when it was asked.
    """
    start = sealed_at
    if every_vouches and grants.epoch == replaced_epoch and grants.at is not None:
        start = min(start, grants.at)
    return start + LEASE + LEASE_MARGIN
