"""The unattended pass is incremental: from a cursor it looks only at what changed, decides on a
read, writes only what is still current, and ends where a full pass would have."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from protocol.errors import MorphzError
from protocol.governance import PassCursor, plan_pass
from protocol.view import ReadView
from service.context import Context
from service.governance import GovernanceWorker, apply_pass, run_pass
from storage import LmdbStore
from storage.memory import MemoryBackend
from tests.examples import examples

IDS = [f"f{i}" for i in range(6)]
LABELS = st.sampled_from(["contradicts", "supersedes"])


def tx(ctx: Context, text: str) -> bool:
    return ctx.commit(f"(context-tx (base-version {ctx.version()}) {text})").committed


def tick(ctx: Context) -> None:
    ctx.observe("user_message", "go")
    ctx.claim()


def apply_op(ctx: Context, op: tuple[Any, ...], n: int) -> object:
    """Apply *op*; what happened (so both contexts can be checked to agree)."""
    kind = op[0]
    if kind in ("derive", "revise"):
        src = f" (from {op[2]})" if op[2] is not None else ""
        return tx(ctx, f"({kind} {op[1]}{src} (v {n}))")
    if kind == "fresh":  # a new candidate, maybe one a human must decide
        src = f" (from {op[2]})" if op[2] is not None else ""
        risk = " (risk high)" if op[3] else ""
        return tx(ctx, f"(derive {op[1]}{src} (v {n})) (envelope {op[1]} (trust candidate){risk})")
    if kind == "secret":
        return tx(ctx, f'(revise {op[1]} (db "password=hunter{n}"))')
    if kind == "candidate":
        return tx(ctx, f"(envelope {op[1]} (trust candidate))")
    if kind == "procedural":
        return tx(ctx, f"(envelope {op[1]} (kind procedural))")
    if kind == "risky":
        return tx(ctx, f"(envelope {op[1]} (risk high))")
    if kind == "keys":
        return tx(ctx, f"(envelope {op[1]} (keys {op[2]}))")
    if kind in ("relate", "unrelate"):
        return tx(ctx, f"({kind} {op[1]} {op[2]} {op[3]})")
    if kind in ("protect", "unprotect", "retire"):
        return tx(ctx, f"({kind} {op[1]})")
    if kind == "review":
        try:
            return ctx.review(op[1], op[2], "carol").decision.verdict
        except MorphzError as e:
            return type(e).__name__
    if kind == "quarantine":
        return ctx.quarantine([op[1]])
    if kind == "observe":  # a tool result, maybe holding a secret
        text = f"out {n} password=hunter{n}x" if op[1] else f"out {n}"
        return ctx.observe("tool_result", text).ref
    if kind == "use":
        ctx.record_trace({"tick": ctx.tick(), "cited": [op[1]], "outcome": op[2]})
        return None
    assert kind == "tick"
    tick(ctx)
    return None


def located(report: dict[str, Any], record: str) -> set[tuple[str, int, str, str]]:
    """The sensitive content a pass reported in *record*s: (ref, offset, rule, action)."""
    return {
        (s["ref"], s["start"], s["rule"], s["action"])
        for s in report["sensitive"]
        if s["record"] == record
    }


def state(ctx: Context) -> dict[str, Any]:
    return ctx.backend.read(lambda v: {f.id: f.to_record() for f in v.iter_frames()})


class Governed(RuleBasedStateMachine):
    """The same operations on two contexts: one governed by a chain of incremental passes (each
    from the last one's cursor), the other by full passes. After every step they must hold the
    same frames, record for record (trust, reviewers, reasons, versions), and every pass must
    have decided the same. Sensitive content: the incremental chain reports each observation
    once, and together exactly what a full pass reports; frames quarantined for it are the
    same."""

    frames = Bundle("frames")

    def __init__(self) -> None:
        super().__init__()
        self.inc, self.full = Context(MemoryBackend()), Context(MemoryBackend())
        self.cursor: PassCursor | None = None
        self.passes = 0
        self.n = 0
        self.failed_uses = 3
        self.observed: set[tuple[str, int, str, str]] = set()

    def both(self, *op: Any) -> None:
        self.n += 1
        assert apply_op(self.inc, op, self.n) == apply_op(self.full, op, self.n), op

    @initialize(failed_uses=st.sampled_from([1, 2, 3]))
    def options(self, failed_uses: int) -> None:
        self.failed_uses = failed_uses

    @rule(target=frames, source=st.none() | frames)
    def derive(self, source: str | None) -> str:
        fid = f"f{self.n}"
        self.both("derive", fid, source)
        return fid

    @rule(target=frames, source=st.none() | frames, risky=st.booleans())
    def candidate(self, source: str | None, risky: bool) -> str:
        fid = f"f{self.n}"
        self.both("fresh", fid, source, risky)
        return fid

    @rule(fid=frames, source=st.none() | frames)
    def revise(self, fid: str, source: str | None) -> None:
        self.both("revise", fid, source)

    @rule(fid=frames, what=st.sampled_from(["secret", "candidate", "procedural", "risky"]))
    def envelope(self, fid: str, what: str) -> None:
        self.both(what, fid)

    @rule(fid=frames, key=st.sampled_from(["k1", "k2"]))
    def keys(self, fid: str, key: str) -> None:
        self.both("keys", fid, key)

    @rule(subject=frames, label=LABELS, obj=frames, drop=st.booleans())
    def relate(self, subject: str, label: str, obj: str, drop: bool) -> None:
        self.both("unrelate" if drop else "relate", subject, label, obj)

    @rule(fid=frames, what=st.sampled_from(["protect", "unprotect", "retire", "quarantine"]))
    def lifecycle(self, fid: str, what: str) -> None:
        self.both(what, fid)

    @rule(fid=frames, decision=st.sampled_from(["accept", "reject"]))
    def review(self, fid: str, decision: str) -> None:
        self.both("review", fid, decision)

    @rule(fid=frames, outcome=st.sampled_from(["ok", "failed", "failed"]))
    def use(self, fid: str, outcome: str) -> None:
        self.both("use", fid, outcome)

    @rule(secret=st.booleans())
    def observe(self, secret: bool) -> None:
        self.both("observe", secret)

    @rule()
    def claim(self) -> None:
        self.both("tick")

    @rule()
    def governance_pass(self) -> None:
        a = run_pass(self.inc.backend, failed_uses=self.failed_uses, cursor=self.cursor)
        b = run_pass(self.full.backend, failed_uses=self.failed_uses)
        assert a["full"] == (self.cursor is None) and b["full"]
        self.cursor = a["cursor"]
        assert (a["decisions"], a["quarantined"]) == (b["decisions"], b["quarantined"])
        assert a["held"] == b["held"] and a["deferred"] == b["deferred"] == []
        assert set(a["spared"]) <= set(b["spared"])
        new = located(a, "observation")
        assert not new & self.observed  # each observation is reported by one pass of the chain
        self.observed |= new
        assert self.observed == located(b, "observation")
        quarantined = {x for x in located(a, "frame") if x[3] == "quarantined"}
        assert quarantined == {x for x in located(b, "frame") if x[3] == "quarantined"}
        assert {x[0] for x in quarantined} <= set(a["quarantined"])

    @invariant()
    def same_frames(self) -> None:
        assert self.inc.version() == self.full.version()
        assert state(self.inc) == state(self.full)


Governed.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
test_a_chain_of_incremental_passes_decides_what_full_passes_decide = Governed.TestCase


def test_incremental_passes_agree_on_lmdb_too(tmp_path: Path) -> None:
    ops: list[tuple[Any, ...]] = [
        ("derive", "f0", None),
        ("derive", "f1", None),
        ("pass",),
        ("derive", "f2", "f1"),
        ("candidate", "f2"),
        ("derive", "f3", None),
        ("candidate", "f3"),
        ("relate", "f3", "contradicts", "f0"),
        ("pass",),
        ("procedural", "f1"),
        ("use", "f1", "failed"),
        ("use", "f1", "failed"),
        ("candidate", "f1"),
        ("risky", "f1"),  # held for a human
        ("pass",),
        ("review", "f1", "accept"),  # a human's accept stands against the failures
        ("use", "f1", "failed"),
        ("pass",),
    ]
    inc = Context(LmdbStore.open(tmp_path / "inc", sync=False))
    full = Context(LmdbStore.open(tmp_path / "full", sync=False))
    try:
        cursor = None
        for n, op in enumerate(ops):
            if op[0] == "pass":
                cursor = run_pass(inc.backend, cursor=cursor)["cursor"]
                run_pass(full.backend)
            else:
                apply_op(inc, op, n)
                apply_op(full, op, n)
            assert state(inc) == state(full)
        trust = {fid: rec["envelope"]["trust"] for fid, rec in state(inc).items()}
        assert trust == {"f0": "quarantined", "f1": "accepted", "f2": "accepted", "f3": "accepted"}
    finally:
        inc.close()
        full.close()


class Watched:
    """A read view that counts the reads of a pass and refuses to list every frame."""

    def __init__(self, view: ReadView, *, missing: int | None = None) -> None:
        self._view = view
        self._missing = missing
        self.frames = 0
        self.listed = False

    def frame(self, frame_id: str) -> Any:
        self.frames += 1
        return self._view.frame(frame_id)

    def iter_frames(self) -> Iterator[Any]:
        self.listed = True
        return self._view.iter_frames()

    def txlog(self, version: int) -> Any:
        return None if version == self._missing else self._view.txlog(version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


def test_an_incremental_pass_reads_only_what_changed(ctx: Context) -> None:
    for i in range(40):
        tx(ctx, f"(derive old{i} (v {i}))")
    cursor = run_pass(ctx.backend)["cursor"]
    tx(ctx, "(derive hint (x))")
    tx(ctx, "(envelope hint (trust candidate))")
    tx(ctx, "(relate old3 contradicts old1)")
    watched: list[Watched] = []

    def plan(v: ReadView) -> Any:
        watched.append(Watched(v))
        return plan_pass(watched[-1], cursor=cursor)

    p = ctx.backend.read(plan)
    assert not p.full and not watched[0].listed and watched[0].frames < 10
    assert [(d.frame_id, d.verdict) for d in p.decisions] == [("hint", "accept")]
    assert dict(p.quarantine) == {"old1": ("contradicted: old3 contradicts old1",)}
    report = apply_pass(ctx.backend, p)
    assert report["quarantined"] == ["old1"] and len(report["versions"]) == 2
    # Nothing changed since: the next pass reads no frame and writes nothing.
    version = ctx.version()
    watched.clear()
    cursor = report["cursor"]
    p = ctx.backend.read(plan)
    assert watched[-1].frames == 0 and not p.writes
    assert apply_pass(ctx.backend, p)["cursor"].version == version == ctx.version()


def test_a_pass_falls_back_to_a_full_one_when_it_cannot_follow_the_log(ctx: Context) -> None:
    tx(ctx, "(derive a (x))")
    cursor = run_pass(ctx.backend)["cursor"]
    tx(ctx, "(derive b (y))")
    tx(ctx, "(envelope b (trust candidate))")
    gap = ctx.backend.read(
        lambda v: plan_pass(Watched(v, missing=cursor.version + 1), cursor=cursor)
    )
    assert gap.full and [d.frame_id for d in gap.decisions] == ["b"]
    other = ctx.backend.read(lambda v: plan_pass(v, cursor=cursor, failed_uses=2))
    assert other.full  # made with other options
    same = ctx.backend.read(lambda v: plan_pass(v, cursor=cursor))
    assert not same.full and [d.frame_id for d in same.decisions] == ["b"]


def test_a_decision_on_a_frame_that_changed_since_the_read_waits_for_the_next_pass(
    ctx: Context,
) -> None:
    tx(ctx, "(derive old-fact (region cn-beijing))")
    tx(ctx, "(derive hint (x))")
    tx(ctx, "(envelope hint (trust candidate))")
    cursor = run_pass(ctx.backend)["cursor"]
    tx(ctx, "(derive new-fact (region cn-shanghai))")
    tx(ctx, "(relate new-fact contradicts old-fact)")
    tx(ctx, "(derive fine (y))")
    tx(ctx, "(envelope fine (trust candidate))")
    plan = ctx.backend.read(lambda v: plan_pass(v, cursor=cursor))
    assert [d.frame_id for d in plan.decisions] == ["fine"] and plan.quarantine
    # Between the read and the write: the candidate now carries a secret.
    tx(ctx, '(revise fine (db "password=hunter22"))')
    version = ctx.version()
    report = apply_pass(ctx.backend, plan)
    assert report["deferred"] == ["fine", "old-fact"] and report["versions"] == []
    assert ctx.version() == version  # nothing written: the quarantine waits with the admission
    assert ctx.frame_record("fine").envelope["trust"] == "candidate"
    report = run_pass(ctx.backend, cursor=report["cursor"])
    assert not report["full"] and report["quarantined"] == ["old-fact"]
    assert [(d["frame"], d["verdict"]) for d in report["decisions"]] == [("fine", "reject")]
    # A quarantine decided on a frame that changed since waits too.
    tx(ctx, "(derive newer (region cn-hangzhou))")
    tx(ctx, "(relate newer supersedes new-fact)")
    plan = ctx.backend.read(lambda v: plan_pass(v, cursor=report["cursor"]))
    assert dict(plan.quarantine).keys() == {"new-fact"}
    tx(ctx, "(protect new-fact)")
    report = apply_pass(ctx.backend, plan)
    assert report["deferred"] == ["new-fact"] and report["quarantined"] == []
    report = run_pass(ctx.backend, cursor=report["cursor"])
    assert report["quarantined"] == [] and report["deferred"] == []  # protected: no finding
    tx(ctx, "(unprotect new-fact)")
    assert run_pass(ctx.backend, cursor=report["cursor"])["quarantined"] == ["new-fact"]


def test_the_unused_rule_runs_in_sweeps_at_most_a_quarter_of_its_ticks_apart(
    ctx: Context,
) -> None:
    tx(ctx, "(derive idle (x))")
    tx(ctx, "(derive busy (y))")
    report = run_pass(ctx.backend, unused_ticks=8)
    assert report["full"] and report["cursor"].swept == 0
    swept = []
    for _ in range(10):
        tick(ctx)
        ctx.record_trace({"tick": ctx.tick(), "frames_present": ["busy"]})
        report = run_pass(ctx.backend, unused_ticks=8, cursor=report["cursor"])
        assert not report["full"]
        swept.append(report["cursor"].swept)
        if report["quarantined"]:
            assert (ctx.tick(), report["quarantined"]) == (8, ["idle"])
    assert swept == [0, 2, 2, 4, 4, 6, 6, 8, 8, 10]
    assert ctx.frame_record("idle").envelope["trust"] == "quarantined"
    assert ctx.frame_record("busy").envelope["trust"] == "accepted"


def test_a_failing_procedure_is_found_from_new_uses_and_earlier_ones(ctx: Context) -> None:
    tx(ctx, "(derive steps (a b))")
    tx(ctx, "(envelope steps (kind procedural))")
    for outcome in ("failed", "failed"):
        ctx.record_trace({"tick": 0, "cited": ["steps"], "outcome": outcome})
    report = run_pass(ctx.backend)
    assert report["quarantined"] == [] and report["cursor"].trace == 2
    ctx.record_trace({"tick": 0, "cited": ["steps"], "outcome": "failed"})
    report = run_pass(ctx.backend, cursor=report["cursor"])
    assert report["quarantined"] == ["steps"] and report["cursor"].trace == 3


def test_the_embedded_worker_keeps_its_cursor(ctx: Context) -> None:
    tx(ctx, "(derive hint (x))")
    tx(ctx, "(envelope hint (trust candidate))")
    worker = GovernanceWorker(ctx, every=60)
    assert worker.cursor is None
    assert worker.run_once()["full"]
    assert ctx.frame_record("hint").envelope["trust"] == "accepted"
    tx(ctx, "(derive other (y))")
    tx(ctx, "(envelope other (trust candidate))")
    report = worker.run_once()
    assert not report["full"] and [d["frame"] for d in report["decisions"]] == ["other"]
    assert worker.cursor is report["cursor"] and worker.cursor.version == ctx.version()


def test_what_changed_elsewhere_is_followed_to_the_frames_it_settles(ctx: Context) -> None:
    tx(ctx, "(derive fact (region cn-beijing))")
    tx(ctx, "(derive claim (region cn-shanghai)) (envelope claim (trust candidate) (risk high))")
    tx(ctx, "(relate claim contradicts fact)")
    tx(ctx, "(derive note (from claim) (x))")  # a candidate: its source is one
    report = run_pass(ctx.backend)
    assert report["held"] == ["claim", "note"] and report["quarantined"] == []
    # A human accepts the contradicting frame: the frame it contradicts did not change.
    ctx.review("claim", "accept", "carol")
    report = run_pass(ctx.backend, cursor=report["cursor"])
    assert not report["full"] and report["quarantined"] == ["fact"]
    # The held candidate is decided again though nothing about it was written.
    assert [(d["frame"], d["verdict"]) for d in report["decisions"]] == [("note", "accept")]


def test_what_is_written_between_the_read_and_the_write_is_seen_by_the_next_pass(
    ctx: Context,
) -> None:
    tx(ctx, "(derive hint (x)) (envelope hint (trust candidate))")
    cursor = run_pass(ctx.backend)["cursor"]
    tx(ctx, "(derive fine (y)) (envelope fine (trust candidate))")
    plan = ctx.backend.read(lambda v: plan_pass(v, cursor=cursor))
    tx(ctx, "(derive late (z)) (envelope late (trust candidate))")  # meanwhile
    report = apply_pass(ctx.backend, plan)
    assert [d["frame"] for d in report["decisions"]] == ["fine"] and report["deferred"] == []
    assert report["cursor"].version == plan.version  # the write follows another one
    report = run_pass(ctx.backend, cursor=report["cursor"])
    assert [d["frame"] for d in report["decisions"]] == ["late"]
    assert report["cursor"].version == ctx.version()  # this one followed its own read
