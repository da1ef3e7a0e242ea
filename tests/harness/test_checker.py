"""The history checker (R21–R25): real multi-thread histories check ok, doctored ones do not.

Each "thread" is a plain object with its own base version, interleaved by hand
(or by Hypothesis) over one context on the in-memory store. Every submission
is recorded as a :class:`Submission`; the log, events and final state are read
back from the store. Each doctoring of the history breaks one property and the
checker must name exactly that kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.checker import (
    DUPLICATE_APPLY,
    LOG_GAP,
    LOST_ACK,
    LOST_UPDATE,
    REPLAY_DIVERGED,
    REPLAY_MISMATCH,
    UNJUSTIFIED_CONFLICT,
    UNJUSTIFIED_TOO_OLD,
    Submission,
    Verdict,
    check_history,
)
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.state import Event, Frame
from protocol.txlang import parse_tx
from protocol.view import ReadView
from service.context import Context
from storage.memory import MemoryBackend
from tests.examples import examples


@dataclass
class History:
    submissions: list[Submission]
    log: list[dict[str, Any]]
    events: list[Event]
    frames: list[Frame]
    relations: list[tuple[str, str, str]]
    window: int
    history_keep: int

    def check(self, **changes: Any) -> Verdict:
        h = replace(self, **changes)
        return check_history(
            h.submissions,
            h.log,
            events=h.events,
            final_frames=h.frames,
            final_relations=h.relations,
            window=h.window,
            history_keep=h.history_keep,
        )


def read_history(ctx: Context, submissions: list[Submission]) -> History:
    def run(v: ReadView) -> History:
        meta = v.meta()
        log = [v.txlog(i) for i in range(1, meta.version + 1)]
        assert all(rec is not None for rec in log)
        return History(
            submissions=list(submissions),
            log=log,  # type: ignore[arg-type]
            events=list(v.iter_events()),
            frames=list(v.iter_frames()),
            relations=list(v.iter_relations()),
            window=meta.window,
            history_keep=meta.history_keep,
        )

    return ctx.backend.read(run)


@dataclass
class Thread:
    """One agent thread: a base version it read, and the submissions it made."""

    ctx: Context
    name: str
    out: list[Submission]
    base: int = 0
    n: int = 0
    last: tuple[str, str] | None = None
    attempt: int = 1
    receipts: list[Receipt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.read()

    def read(self) -> None:
        self.base = self.ctx.version()

    def submit(
        self, ops: str, *, lose_reply: bool = False, never_arrives: bool = False
    ) -> Receipt | None:
        """Submit *ops* from the thread's base under a fresh client id."""
        client_id = f"{self.name}/{self.n}"
        self.n += 1
        self.attempt = 1
        self.last = (f"(context-tx (base-version {self.base}) {ops})", client_id)
        return self._send(lose_reply=lose_reply, never_arrives=never_arrives)

    def retry(self, *, lose_reply: bool = False) -> Receipt | None:
        """Resubmit the last transaction under the same client id (a lost reply, say)."""
        assert self.last is not None
        self.attempt += 1
        return self._send(lose_reply=lose_reply, never_arrives=False)

    def _send(self, *, lose_reply: bool, never_arrives: bool) -> Receipt | None:
        assert self.last is not None
        text, client_id = self.last
        tx = parse_tx(text).model_copy(update={"client_id": client_id})
        if never_arrives:
            self.out.append(Submission.unknown(client_id, self.name, tx, self.attempt))
            return None
        receipt = self.ctx.commit(text, client_id=client_id)
        self.receipts.append(receipt)
        if lose_reply:
            self.out.append(Submission.unknown(client_id, self.name, tx, self.attempt))
        else:
            self.out.append(
                Submission.from_receipt(client_id, self.name, tx, receipt, self.attempt)
            )
        return receipt


@dataclass
class Story:
    history: History
    versions: dict[str, int]
    """Named versions of the story, for the doctoring tests."""


def build_story() -> Story:
    ctx = Context(MemoryBackend(), window=2)
    subs: list[Submission] = []
    v: dict[str, int] = {}
    request = ctx.observe("user_message", "ship the release to eu")
    tests = ctx.observe("tool_result", "tests passed")
    ctx.claim()

    admin = Thread(ctx, "admin", subs)
    admin.submit(
        f"(derive release (from {request.ref}) (stage testing)) (derive constraints (region eu)) "
        "(derive notes (x 1)) (relate constraints limits release)"
    )
    v["seed"] = ctx.version()
    a, b, c = Thread(ctx, "a", subs), Thread(ctx, "b", subs), Thread(ctx, "c", subs)

    ra = a.submit(f"(revise release (from {tests.ref}) (stage packaging))")
    assert ra is not None and ra.status == "committed" and not ra.rebased
    v["a_release"] = ra.version
    rb = b.submit("(revise release (stage paused))")
    assert rb is not None and rb.status == "rejected"
    assert [(x.id, x.version) for x in rb.conflicts] == [("release", ra.version)]
    b.read()
    rb2 = b.submit("(revise release (stage paused) (note tests-passed))")
    assert rb2 is not None and rb2.status == "committed"
    v["b_release"] = rb2.version
    dup = a.retry()
    assert dup is not None and dup.duplicate and dup.version == ra.version

    rc = c.submit("(revise notes (x 2))")
    assert rc is not None and rc.status == "committed" and rc.rebased
    v["c_notes"] = rc.version
    stale = c.submit("(relate notes supports release)")
    assert stale is not None and [x.id for x in stale.conflicts] == ["notes", "release"]
    c.read()
    relate = c.submit("(relate notes supports release)")
    assert relate is not None and relate.status == "committed"
    v["c_relate"] = relate.version

    # A group commit: two transactions of one thread decided in one store write.
    a.read()
    texts = [
        (f"(context-tx (base-version {a.base}) (derive budget (x 10)))", "a/g1"),
        (f"(context-tx (base-version {a.base}) (revise budget (x 11)))", "a/g2"),
    ]
    group = ctx.commit_many(list(texts))
    for (text, cid), r in zip(texts, group, strict=True):
        tx = parse_tx(text).model_copy(update={"client_id": cid})
        subs.append(Submission.from_receipt(cid, "a", tx, r))
    # The second was based before the first: budget changed since, so it conflicts.
    assert [r.status for r in group] == ["committed", "rejected"]

    # The reply is lost; the retry gets the original receipt back.
    a.read()
    lost = a.submit("(derive plan (from release constraints) (go eu))", lose_reply=True)
    assert lost is not None and lost.status == "committed"
    again = a.retry()
    assert again is not None and again.duplicate and again.version == lost.version
    # A submission that never reached the context.
    b.submit("(derive ghost (x 0))", never_arrives=True)

    # Observations retired once the request is delivered; citing a retired one is fine.
    ctx.deliver(request.ref)
    b.read()
    retire_obs = b.submit(f"(retire {tests.ref} {request.ref})")
    assert retire_obs is not None and retire_obs.status == "committed"
    cite = c.submit(f"(derive evidence (from {tests.ref}) (tests passed))")
    assert cite is not None and cite.status == "committed" and cite.rebased
    restore_stale = c.submit(f"(restore {tests.ref})")
    assert restore_stale is not None and restore_stale.errors[0].code == "conflict"

    # A retirement through the window, finalized by the runtime at a tick.
    admin.read()
    marked = admin.submit("(retire constraints)")
    assert marked is not None and marked.retiring[0].due_tick == 3
    ctx.observe("tool_result", "deploy log")
    ctx.claim()
    ctx.observe("external", "calendar: freeze")
    assert ctx.claim().finalized == ["constraints"]
    v["finalized"] = ctx.version()
    revived = b.submit("(restore constraints)")
    assert revived is not None
    assert [(x.id, x.version) for x in revived.conflicts] == [("constraints", v["finalized"])]

    # The successor rule retires the old frame at once (R17).
    a.read()
    succ = a.submit(
        "(derive release-v2 (from release) (stage shipped)) "
        "(relate release-v2 supersedes release) (retire release)"
    )
    assert succ is not None and succ.retired_now == ("release",)
    c.read()
    assert c.submit("(unrelate notes supports release) (protect notes)") is not None

    # A commit no thread recorded (an operator at the console).
    ctx.commit(
        f"(context-tx (base-version {ctx.version()}) (revise evidence (tests passed twice)))"
    )
    v["untracked"] = ctx.version()
    return Story(read_history(ctx, subs), v)


@pytest.fixture
def story() -> Story:
    return build_story()


def sub_index(h: History, pred: Callable[[Submission], bool]) -> int:
    found = [i for i, s in enumerate(h.submissions) if pred(s)]
    assert found, "no such submission"
    return found[0]


def with_sub(h: History, i: int, **update: Any) -> list[Submission]:
    subs = list(h.submissions)
    subs[i] = subs[i].model_copy(update=update)
    return subs


def with_record(h: History, version: int, **update: Any) -> list[dict[str, Any]]:
    log = [dict(rec) for rec in h.log]
    log[version - 1].update(update)
    return log


# --- the real history ---------------------------------------------------------------


def test_a_real_history_checks_ok(story: Story) -> None:
    h = story.history
    verdict = h.check()
    assert verdict.ok, verdict.summary()
    counts = verdict.counts
    assert counts.replayed == len(h.log)
    assert counts.unknown == 2
    assert counts.rejected >= 5
    assert counts.committed >= 10
    kinds = {rec["kind"] for rec in h.log}
    assert kinds == {"model", "runtime"}
    assert verdict.summary().startswith("ok: ")
    assert verdict.to_dict() == {"ok": True, "counts": counts.model_dump(), "violations": []}


def test_from_receipt_fills_the_footprint_and_the_receipt() -> None:
    tx = parse_tx(
        "(context-tx (base-version 3) (derive b (from a @e1) (x)) (relate b supports c) (retire @e2))"
    )
    r = Receipt(
        status="rejected",
        version=7,
        base_version=3,
        rebased=True,
        errors=({"op": None, "code": "conflict", "message": "m"},),  # type: ignore[arg-type]
        conflicts=({"id": "a", "version": 5},),  # type: ignore[arg-type]
    )
    s = Submission.from_receipt("t/1", "t", tx, r, attempt=2)
    assert s.footprint == ("e:@e1", "e:@e2", "f:a", "f:b", "f:c", "r:b\x00supports\x00c")
    assert s.source_events == ("e:@e1",)
    assert s.checked_keys() == frozenset(s.footprint) - {"e:@e1"}
    assert (s.outcome, s.version, s.conflicts, s.error_code, s.attempt) == (
        "rejected",
        7,
        (("a", 5),),
        "conflict",
        2,
    )
    lost = Submission.unknown("t/2", "t", tx)
    assert (lost.outcome, lost.version, lost.base_version) == ("unknown", None, 3)


# --- (a) replay -----------------------------------------------------------------------


def test_a_changed_body_in_the_final_state_is_a_replay_mismatch(story: Story) -> None:
    h = story.history
    frames = [f.copy() for f in h.frames]
    notes = next(f for f in frames if f.id == "notes")
    notes.body = ((Symbol("x"), 99),)
    verdict = h.check(frames=frames)
    assert verdict.kinds() == {REPLAY_MISMATCH}
    assert verdict.violations[0].detail.startswith("frame notes: body")


def test_a_changed_lifecycle_relation_or_event_is_a_replay_mismatch(story: Story) -> None:
    h = story.history
    frames = [f.copy() for f in h.frames]
    next(f for f in frames if f.id == "constraints").lifecycle = "active"
    assert h.check(frames=frames).kinds() == {REPLAY_MISMATCH}

    verdict = h.check(relations=[*h.relations, ("notes", "supports", "release")])
    assert verdict.kinds() == {REPLAY_MISMATCH}
    assert "relation notes supports release" in verdict.violations[0].detail

    events = [e.copy() for e in h.events]
    events[0].lifecycle = "active"
    events[0].retired_version = None
    verdict = h.check(events=events)
    assert verdict.kinds() == {REPLAY_MISMATCH}
    assert verdict.violations[0].detail.startswith("event @e1:")


def test_a_dropped_log_record_is_a_gap(story: Story) -> None:
    h = story.history
    v = story.versions["c_notes"]
    log = [rec for rec in h.log if rec["version"] != v]
    verdict = h.check(log=log)
    assert LOG_GAP in verdict.kinds()
    assert verdict.counts.replayed == 0
    # The acknowledged commit at that version is gone too, and with it the
    # change a later rejection named as its conflict.
    assert verdict.kinds() == {LOG_GAP, LOST_ACK, UNJUSTIFIED_CONFLICT}


def test_a_dropped_last_record_no_longer_replays_to_the_final_state(story: Story) -> None:
    h = story.history
    verdict = h.check(log=h.log[:-1])
    assert verdict.kinds() == {REPLAY_MISMATCH}
    assert verdict.violations[0].detail.startswith("frame evidence:")


def test_an_altered_body_in_a_logged_text_is_caught(story: Story) -> None:
    h = story.history
    v = story.versions["c_notes"]
    text = h.log[v - 1]["text"]
    assert "(x 2)" in text
    verdict = h.check(log=with_record(h, v, text=text.replace("(x 2)", "(x 3)")))
    assert verdict.kinds() == {REPLAY_MISMATCH}
    assert "frame notes" in verdict.violations[0].detail


def test_an_altered_target_in_a_logged_text_diverges(story: Story) -> None:
    h = story.history
    v = story.versions["c_notes"]
    text = h.log[v - 1]["text"].replace("revise notes", "revise release")
    verdict = h.check(log=with_record(h, v, text=text))
    assert REPLAY_DIVERGED in verdict.kinds()


def test_an_altered_runtime_record_diverges(story: Story) -> None:
    h = story.history
    v = story.versions["finalized"]
    verdict = h.check(log=with_record(h, v, finalize=["notes"]))
    assert verdict.kinds() == {REPLAY_DIVERGED}
    assert verdict.counts.replayed == v - 1


def test_altered_changes_in_the_log_diverge(story: Story) -> None:
    h = story.history
    v = story.versions["c_notes"]
    verdict = h.check(log=with_record(h, v, changes=["notes", "release"]))
    assert REPLAY_DIVERGED in verdict.kinds()
    assert "changes" in next(x for x in verdict.violations if x.kind == REPLAY_DIVERGED).detail


# --- (b) lost updates -----------------------------------------------------------------


def test_a_committed_submission_from_an_older_base_is_a_lost_update(story: Story) -> None:
    h = story.history
    v = story.versions["c_relate"]
    i = sub_index(h, lambda s: s.outcome == "committed" and s.version == v)
    verdict = h.check(submissions=with_sub(h, i, base_version=story.versions["seed"]))
    assert verdict.kinds() == {LOST_UPDATE}
    details = {x.detail.split(", but ")[1] for x in verdict.violations}
    assert details == {
        f"v{story.versions['c_notes']} changed notes in between",
        f"v{story.versions['a_release']} changed release in between",
    }


def test_a_logged_commit_over_a_conflicting_change_is_a_lost_update(story: Story) -> None:
    h = story.history
    v = story.versions["b_release"]
    base = h.log[v - 1]["base_version"]
    seed = story.versions["seed"]
    text = h.log[v - 1]["text"].replace(f"(base-version {base})", f"(base-version {seed})")
    log = with_record(h, v, text=text, base_version=seed)
    i = sub_index(h, lambda s: s.outcome == "committed" and s.version == v)
    verdict = h.check(log=log, submissions=with_sub(h, i, base_version=seed))
    assert LOST_UPDATE in verdict.kinds()
    assert REPLAY_DIVERGED in verdict.kinds()  # the engine would have rejected it
    details = [x.detail for x in verdict.violations if x.kind == LOST_UPDATE]
    assert any(d.startswith(f"log record v{v} ") for d in details)


# --- (c) rejections -------------------------------------------------------------------


def test_a_conflict_with_a_version_that_did_not_change_the_id_is_unjustified(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.outcome == "rejected" and s.error_code == "conflict")
    assert h.submissions[i].conflicts == (("release", story.versions["a_release"]),)
    bad = [
        (("release", story.versions["c_notes"]),),  # v changed notes, not release
        (("notes", story.versions["c_notes"]),),  # not in the footprint
        (("release", 1),),  # not after the base
        (("release", 999),),  # after the rejection
        (),  # no conflict named
    ]
    for conflicts in bad:
        verdict = h.check(submissions=with_sub(h, i, conflicts=conflicts))
        assert verdict.kinds() == {UNJUSTIFIED_CONFLICT}, conflicts


def test_a_too_old_rejection_within_the_kept_history_is_unjustified(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.outcome == "rejected" and s.error_code == "conflict")
    verdict = h.check(submissions=with_sub(h, i, error_code="too_old", conflicts=()))
    assert verdict.kinds() == {UNJUSTIFIED_TOO_OLD}


def test_a_real_too_old_rejection_checks_ok() -> None:
    ctx = Context(MemoryBackend(), history_keep=2)
    subs: list[Submission] = []
    t, old = Thread(ctx, "t", subs), Thread(ctx, "old", subs)
    for i in range(4):
        t.read()
        t.submit(f"(derive f{i} (x {i}))")
    r = old.submit("(derive g (x 1))")
    assert r is not None and r.errors[0].code == "too_old"
    assert read_history(ctx, subs).check().ok


# --- (d) exactly once -----------------------------------------------------------------


def test_a_client_id_on_two_log_records_is_a_duplicate_apply(story: Story) -> None:
    h = story.history
    v = story.versions["untracked"]
    assert h.log[v - 1]["client_id"] is None
    receipt = dict(h.log[v - 1]["receipt"], client_id="a/0")
    verdict = h.check(log=with_record(h, v, client_id="a/0", receipt=receipt))
    assert verdict.kinds() == {DUPLICATE_APPLY}
    assert verdict.violations[0].detail == (
        f"client id 'a/0' is applied at v{story.versions['a_release']}, v{v}"
    )


# --- (e) durable acknowledgements -----------------------------------------------------


def test_an_ack_whose_log_record_holds_another_client_id_is_lost(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.outcome == "committed" and not s.duplicate)
    verdict = h.check(submissions=with_sub(h, i, client_id="ghost/1"))
    assert verdict.kinds() == {LOST_ACK}


def test_an_ack_at_a_version_the_log_does_not_hold_is_lost(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.outcome == "committed" and not s.duplicate)
    verdict = h.check(submissions=with_sub(h, i, version=len(h.log) + 1))
    assert verdict.kinds() == {LOST_ACK}
    assert "which the log does not hold" in verdict.violations[0].detail


def test_a_duplicate_receipt_must_name_the_original_version(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.duplicate)
    verdict = h.check(submissions=with_sub(h, i, version=h.submissions[i].version + 1))  # type: ignore[operator]
    assert verdict.kinds() == {LOST_ACK}
    assert any("name different versions" in x.detail for x in verdict.violations)


def test_an_unknown_outcome_may_be_absent_or_present_once(story: Story) -> None:
    h = story.history
    unknown = [s for s in h.submissions if s.outcome == "unknown"]
    assert len(unknown) == 2
    only_unknown = [s for s in h.submissions if s.outcome != "committed"]
    assert h.check(submissions=only_unknown).ok


def test_verdict_json_and_summary_name_the_violations(story: Story) -> None:
    h = story.history
    i = sub_index(h, lambda s: s.outcome == "committed" and not s.duplicate)
    verdict = h.check(submissions=with_sub(h, i, client_id="ghost/1"))
    d = verdict.to_dict()
    assert d["ok"] is False
    assert d["violations"][0]["kind"] == LOST_ACK
    assert verdict.summary().startswith("1 violation(s) (lost_ack)")


def test_a_malformed_log_is_reported_not_raised(story: Story) -> None:
    h = story.history
    log = [*h.log, {"kind": "model"}, dict(h.log[0])]
    assert LOG_GAP in h.check(log=log).kinds()
    v = story.versions["c_notes"]
    verdict = h.check(log=with_record(h, v, text="(context-tx (base"))
    assert REPLAY_DIVERGED in verdict.kinds()


# --- random interleavings -------------------------------------------------------------

FRAMES = ["a", "b", "c", "d/e"]
ACTIONS = [
    "read", "derive", "derive-from", "revise", "revise", "relate", "unrelate", "retire",
    "retire", "restore", "protect", "unprotect", "cite", "retire-event", "tick", "tick", "retry",
]  # fmt: skip

step = st.tuples(
    st.integers(0, 2),  # thread
    st.sampled_from(ACTIONS),
    st.sampled_from(FRAMES),
    st.sampled_from(FRAMES),
    st.integers(0, 9),  # 0: the reply is lost; 1: the submission never arrives
)


def run_interleaving(steps: list[tuple[int, str, str, str, int]]) -> History:
    """Play *steps* on a fresh context: each step is one thread acting on its own base."""
    ctx = Context(MemoryBackend(), window=1, history_keep=6)
    subs: list[Submission] = []
    seed = Thread(ctx, "seed", subs)
    seed.submit(" ".join(f"(derive {f} (v 0))" for f in FRAMES))
    threads = [Thread(ctx, f"t{i}", subs) for i in range(3)]
    refs: list[str] = []
    for n, (index, action, x, y, fate) in enumerate(steps):
        t = threads[index]
        lose, never = fate == 0, fate == 1
        if action == "read":
            t.read()
        elif action == "tick":
            refs.append(ctx.observe("tool_result", f"result {n}").ref)
            ctx.claim()
        elif action == "retry":
            if t.last is not None:
                t.retry(lose_reply=lose)
        elif action in ("cite", "retire-event") and not refs:
            continue
        else:
            ops = {
                "derive": f"(derive {x}-{n} (v {n}))",
                "derive-from": f"(derive {x}-{n} (from {y}) (v {n}))",
                "revise": f"(revise {x} (v {n}))",
                "relate": f"(relate {x} supports {y})",
                "unrelate": f"(unrelate {x} supports {y})",
                "retire": f"(retire {x})",
                "restore": f"(restore {x})",
                "protect": f"(protect {x})",
                "unprotect": f"(unprotect {x})",
                "cite": f"(derive {x}-{n} (from {refs[-1] if refs else ''}) (v {n}))",
                "retire-event": f"(retire {refs[0] if refs else ''})",
            }[action]
            t.submit(ops, lose_reply=lose, never_arrives=never)
    return read_history(ctx, subs)


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(step, min_size=5, max_size=60))
def test_random_interleavings_check_ok(steps: list[tuple[int, str, str, str, int]]) -> None:
    h = run_interleaving(steps)
    verdict = h.check()
    assert verdict.ok, verdict.summary()
    assert verdict.counts.replayed == len(h.log)
