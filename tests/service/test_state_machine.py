"""Random operation sequences against a naive model of the rules (R7–R20).

The model below re-states the spec as plainly as possible (full scans, no
overlay, no indexes); the engine runs over a real LMDB store. After every
step the two must agree on every frame, event, relation, version and tick, and
a rejected transaction must leave the store exactly as it was.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.errors import RequestError
from service.context import Context
from storage import LmdbStore
from tests.examples import examples

FRAME_IDS = ["a", "b", "c", "d/e", "发布"]
LABELS = ["supports", "supersedes"]
WINDOW = 4


@dataclass
class MFrame:
    revision: int
    body: str
    sources: list[str]
    lifecycle: str = "active"
    protected: bool = False
    due: int | None = None
    gen: int = 0


@dataclass
class MEvent:
    kind: str
    lifecycle: str = "active"
    delivered: bool = False


@dataclass
class Model:
    version: int = 0
    tick: int = 0
    frames: dict[str, MFrame] = field(default_factory=dict)
    events: dict[str, MEvent] = field(default_factory=dict)
    relations: set[tuple[str, str, str]] = field(default_factory=set)
    inbox: list[str] = field(default_factory=list)
    pending: list[tuple[int, str, int, int]] = field(default_factory=list)


class Fail(Exception):
    pass


def m_apply(m: Model, op: tuple) -> None:  # type: ignore[type-arg]
    kind = op[0]
    if kind == "derive":
        _, fid, srcs, body = op
        if fid in m.frames:
            raise Fail("frame_exists")
        resolved = m_sources(m, srcs, fid)
        m.frames[fid] = MFrame(1, body, resolved)
    elif kind == "revise":
        _, fid, srcs, body = op
        f = m.frames.get(fid)
        if f is None:
            raise Fail("unknown_ref")
        if f.lifecycle == "retired":
            raise Fail("retired_frame")
        added = m_sources(m, srcs, fid)
        f.revision += 1
        f.body = body
        f.sources += [s for s in added if s not in f.sources]
        if f.lifecycle == "retiring":
            f.lifecycle, f.due = "active", None
    elif kind in ("relate", "unrelate"):
        _, s, label, o = op
        if s not in m.frames or o not in m.frames:
            raise Fail("unknown_ref")
        if kind == "relate":
            m.relations.add((s, label, o))
        elif (s, label, o) in m.relations:
            m.relations.remove((s, label, o))
        else:
            raise Fail("unknown_relation")
    elif kind == "retire":
        ref = op[1]
        if ref.startswith("@"):
            e = m.events.get(ref)
            if e is None:
                raise Fail("unknown_ref")
            if e.kind == "user_message" and not e.delivered:
                raise Fail("causally_protected")
            e.lifecycle = "retired"
            return
        f = m.frames.get(ref)
        if f is None:
            raise Fail("unknown_ref")
        if f.protected:
            raise Fail("protected")
        if f.lifecycle == "active":
            f.lifecycle, f.due, f.gen = "retiring", m.tick + WINDOW, f.gen + 1
    elif kind == "restore":
        ref = op[1]
        target = m.events.get(ref) if ref.startswith("@") else m.frames.get(ref)
        if target is None:
            raise Fail("unknown_ref")
        target.lifecycle = "active"
        if isinstance(target, MFrame):
            target.due = None
    elif kind == "protect":
        f = m.frames.get(op[1])
        if f is None:
            raise Fail("unknown_ref")
        if f.lifecycle == "retired":
            raise Fail("retired_frame")
        f.lifecycle, f.due, f.protected = "active", None, True
    elif kind == "unprotect":
        f = m.frames.get(op[1])
        if f is None:
            raise Fail("unknown_ref")
        f.protected = False


def m_sources(m: Model, srcs: list[str], fid: str) -> list[str]:
    out: list[str] = []
    for s in srcs:
        if s == fid:
            raise Fail("self_source")
        if s not in m.frames and s not in m.events:
            raise Fail("unknown_ref")
        if s not in out:
            out.append(s)
    return out


def m_successor_rule(m: Model) -> None:
    retired_before = {fid for fid, f in m.frames.items() if f.lifecycle == "retired"}
    for fid, f in m.frames.items():
        if f.lifecycle != "retiring":
            continue
        for s, label, o in m.relations:
            if (
                label == "supersedes"
                and o == fid
                and s not in retired_before
                and fid in m.frames[s].sources
            ):
                f.lifecycle, f.due = "retired", None
                break


def render(op: tuple) -> str:  # type: ignore[type-arg]
    kind = op[0]
    if kind in ("derive", "revise"):
        _, fid, srcs, body = op
        frm = f"(from {' '.join(srcs)}) " if srcs else ""
        return f"({kind} {fid} {frm}{body})"
    return "(" + " ".join(op) + ")"


ops = st.one_of(
    st.tuples(
        st.just("derive"),
        st.sampled_from(FRAME_IDS),
        st.lists(st.sampled_from(FRAME_IDS + ["@e1", "@e2", "@e3"]), max_size=2),
        st.sampled_from(["(x 1)", '(note "两")', "(y (z 2))"]),
    ),
    st.tuples(
        st.just("revise"),
        st.sampled_from(FRAME_IDS),
        st.lists(st.sampled_from(FRAME_IDS + ["@e1"]), max_size=1),
        st.sampled_from(["(x 3)", "(w)"]),
    ),
    st.tuples(
        st.sampled_from(["relate", "unrelate"]),
        st.sampled_from(FRAME_IDS),
        st.sampled_from(LABELS),
        st.sampled_from(FRAME_IDS),
    ),
    st.tuples(
        st.sampled_from(["retire", "restore"]),
        st.sampled_from(FRAME_IDS + ["@e1", "@e2", "@e3", "@e4"]),
    ),
    st.tuples(st.sampled_from(["protect", "unprotect"]), st.sampled_from(FRAME_IDS)),
)


class EngineMatchesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="morphz-sm-")
        self.ctx = Context(LmdbStore.open(self.dir, sync=False), window=WINDOW)
        self.m = Model()

    def teardown(self) -> None:
        self.ctx.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(kind=st.sampled_from(["user_message", "tool_result", "recall_result"]))
    def observe(self, kind: str) -> None:
        e = self.ctx.observe(kind, f"{kind} text")
        self.m.events[e.ref] = MEvent(kind)
        self.m.inbox.append(e.ref)

    @rule()
    def claim(self) -> None:
        result = self.ctx.claim()
        m = self.m
        advanced = any(m.events[r].kind != "recall_result" for r in m.inbox)
        m.inbox = []
        expected: list[str] = []
        if advanced:
            m.tick += 1
            for fid in sorted(m.frames):
                f = m.frames[fid]
                if f.lifecycle == "retiring" and f.due is not None and f.due <= m.tick:
                    f.lifecycle, f.due = "retired", None
                    expected.append(fid)
            if expected:
                m.version += 1
        assert sorted(result.finalized) == expected
        assert result.tick == m.tick

    @rule(ref=st.sampled_from(["@e1", "@e2", "@e3", "@e4"]))
    def deliver(self, ref: str) -> None:
        e = self.m.events.get(ref)
        if e is None or e.kind != "user_message":
            with pytest.raises(RequestError):
                self.ctx.deliver(ref)
            return
        self.ctx.deliver(ref)
        e.delivered = True

    @rule(fid=st.sampled_from(FRAME_IDS))
    def derive_plain(self, fid: str) -> None:
        self.transaction([("derive", fid, [], "(x 0)")])

    @rule(
        kind=st.sampled_from(["retire", "retire", "restore", "protect", "unprotect"]),
        fid=st.sampled_from(FRAME_IDS[:3]),
    )
    def lifecycle(self, kind: str, fid: str) -> None:
        self.transaction([(kind, fid)])

    @rule(
        old=st.sampled_from(FRAME_IDS[:3]),
        new=st.sampled_from(FRAME_IDS),
        retire=st.booleans(),
        derive=st.booleans(),
    )
    def successor(self, old: str, new: str, retire: bool, derive: bool) -> None:
        first = ("derive", new, [old], "(x 9)") if derive else ("revise", new, [old], "(x 9)")
        batch = [first, ("relate", new, "supersedes", old)]
        self.transaction(batch + ([("retire", old)] if retire else []))

    @rule(op=ops)
    def single(self, op: tuple) -> None:  # type: ignore[type-arg]
        self.transaction([op])

    @rule(batch=st.lists(ops, min_size=2, max_size=4))
    def transaction(self, batch: list[tuple]) -> None:  # type: ignore[type-arg]
        before = self.ctx.state()
        text = (
            f"(context-tx (base-version {self.m.version}) "
            + " ".join(render(op) for op in batch)
            + ")"
        )
        receipt = self.ctx.commit(text)
        trial = _copy(self.m)
        failed_at: int | None = None
        code = None
        for i, op in enumerate(batch):
            try:
                m_apply(trial, op)
            except Fail as f:
                failed_at, code = i, str(f)
                break
        if failed_at is None:
            m_successor_rule(trial)
            trial.version += 1
            assert receipt.status == "committed", (text, receipt.errors)
            self.m = trial
        else:
            assert receipt.status == "rejected", text
            assert (receipt.errors[0].op, receipt.errors[0].code) == (failed_at, code), text
            assert self.ctx.state() == before  # atomicity: nothing written

    @invariant()
    def agrees(self) -> None:
        state = self.ctx.state()
        m = self.m
        assert (state["version"], state["tick"]) == (m.version, m.tick)
        assert {f["id"]: (f["revision"], f["lifecycle"]) for f in state["frames"]} == {
            fid: (f.revision, f.lifecycle) for fid, f in m.frames.items()
        }
        assert {e["ref"]: e["lifecycle"] for e in state["events"]} == {
            r: e.lifecycle for r, e in m.events.items()
        }
        assert {tuple(r) for r in state["relations"]} == m.relations
        for fid, f in m.frames.items():
            got = self.ctx.frame(fid)
            assert got["body"] == f.body
            assert got["sources"] == f.sources
            assert got["protected"] == f.protected
            assert got.get("due_tick") == f.due


def _copy(m: Model) -> Model:
    import copy

    return copy.deepcopy(m)


EngineMatchesModel.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=50, deadline=None
)
TestEngineMatchesModel = EngineMatchesModel.TestCase
