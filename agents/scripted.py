"""A deterministic scripted model for tests and demos (R38), and the seed stories as policies.

:class:`ScriptedModel` implements :class:`protocol.turns.Model`. It answers a
:class:`~protocol.turns.CompiledInput` by following a *policy*, which is either

* a **function** of the compiled input returning a :class:`~protocol.turns.ModelTurn`
  (or ``None``: nothing to do, a ``done`` turn); :func:`first_match` builds one
  from *rules* (functions of a :class:`Scene` tried in order), or
* a **list of steps** played in order, one per call: each step is a fixed
  ``ModelTurn`` or a function of the :class:`Scene` (so it can read the base
  version and the refs); after the last step every call is a ``done`` turn.

A :class:`Scene` is what a model would read in the input: the observations
present (``@e12`` and their text), the frames present (id, revision, body,
sources when shown), the version to base transactions on
(``CompiledInput.version``), the tick and the maintenance flag. It is parsed
from the messages text, tolerating the usual layouts (see :func:`read_scene`).

In maintenance mode (R32) a scripted model never emits an external tool
action: the model drops any the policy returns, and the ready policies first
try to retire observations their frames already cite.

Ready policies for the seed stories: :func:`release_policy`,
:func:`deployment_policy`, :func:`consolidation_policy`, :func:`pause_policy`.
All are pure and deterministic. Nothing here imports Ray.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from protocol.errors import ParseError
from protocol.forms import Form, Symbol
from protocol.ids import is_event_ref, is_frame_id, ref_seq
from protocol.state import EVENT_KINDS
from protocol.turns import CompiledInput, ModelTurn, Reply, ToolCall
from protocol.tx import ContextTx, Derive, Relate, Retire, Revise
from protocol.txlang import print_tx, read_forms

# -- what the model reads ---------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """An observation present in the input: its reference, its text and, when shown, its kind.

    ``delivered`` is True or False when the input says whether a user request
    was delivered, else None.
    """

    ref: str
    text: str
    kind: str | None = None
    delivered: bool | None = None

    @property
    def is_user(self) -> bool:
        """True when the input marks it as a user message."""
        return self.kind == "user_message"


@dataclass(frozen=True)
class FrameView:
    """A frame as listed in the input. Revision, sources and lifecycle are None/() if not shown."""

    id: str
    revision: int | None = None
    body: tuple[Form, ...] = ()
    sources: tuple[str, ...] = ()
    lifecycle: str | None = None

    def get(self, name: str) -> Form | None:
        """The value of the first ``(name value)`` form of the body, or None."""
        for form in self.body:
            if isinstance(form, tuple) and len(form) == 2 and form[0] == name:
                return form[1]
        return None

    def without(self, *names: str) -> tuple[Form, ...]:
        """The body without the forms headed by any of *names* (to restate it in a revise)."""
        return tuple(f for f in self.body if not (isinstance(f, tuple) and f and f[0] in names))

    @property
    def active(self) -> bool:
        """False only when the input shows the frame retiring or retired."""
        return self.lifecycle in (None, "active")


@dataclass(frozen=True)
class Scene:
    """What one compiled input shows: observations, frames, version, tick, maintenance."""

    compiled: CompiledInput
    observations: tuple[Observation, ...]
    frames: Mapping[str, FrameView] = field(default_factory=dict)

    @property
    def version(self) -> int:
        """The version to write as ``(base-version N)``."""
        return self.compiled.version

    @property
    def tick(self) -> int:
        """The cognitive tick of the input."""
        return self.compiled.tick

    @property
    def maintenance(self) -> bool:
        """True in maintenance mode: no external tool actions (R32)."""
        return self.compiled.capacity.maintenance

    @property
    def batch(self) -> tuple[str, ...]:
        """The observations offered for maintenance (all present ones if none named)."""
        return self.compiled.maintenance_batch or tuple(o.ref for o in self.observations)

    def frame(self, frame_id: str) -> FrameView | None:
        """The listed frame *frame_id*, or None."""
        return self.frames.get(frame_id)

    def has(self, frame_id: str) -> bool:
        """True if *frame_id* is present and not shown retiring or retired."""
        f = self.frames.get(frame_id)
        return f is not None and f.active

    def find(
        self, pattern: str | re.Pattern[str], *, user: bool | None = None
    ) -> Observation | None:
        """The first observation whose text matches *pattern* (case-insensitive).

        *user* True keeps user messages only; False excludes them; None keeps all.
        """
        for obs in self.find_all(pattern, user=user):
            return obs
        return None

    def find_all(
        self, pattern: str | re.Pattern[str], *, user: bool | None = None
    ) -> list[Observation]:
        """Every observation whose text matches *pattern*, in reference order."""
        rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, re.I)
        return [
            o
            for o in self.observations
            if rx.search(o.text) and (user is None or o.is_user == user)
        ]


_REF_TOKEN = r"@e[1-9][0-9]{0,17}"
_HEADER_LEAD = r"[ \t\-*•>\[(<{|]*(?:(?:observation|obs|event|ref)[\s:=]+)?"
_HEADING = re.compile(r"^[ \t]*#", re.M)
_KIND_WORDS = {k: k for k in EVENT_KINDS} | {"user": "user_message", "tool": "tool_result"}
_KIND_RX = re.compile(r"\b(user_message|tool_result|external|recall_result|user|tool)\b", re.I)
_ROLE_KINDS = {"user": "user_message", "tool": "tool_result"}
_UNDELIVERED = re.compile(r"\b(?:undelivered|not delivered|pending|awaiting)\b", re.I)
_DELIVERED = re.compile(r"\bdelivered\b", re.I)
_LIFECYCLES = ("active", "retiring", "retired")
_META_HEADS = frozenset(
    {"revision", "rev", "from", "sources", "lifecycle", "protected", "due-tick", "due"}
)
# The marks that may follow a ref before the observation's text: bracketed
# groups and bare kind/status words, e.g. "[user_message, undelivered]:".
_MARKS = re.compile(
    r"(?:[ \t]*(?:[\[(<{][^\])>}\n]{0,120}[\])>}]"
    r"|(?:user_message|tool_result|external|recall_result|undelivered|delivered|pending"
    r"|active)\b|[:,;|—-]))*"
)
_REVISION = re.compile(r"(?:\brev(?:ision)?\s*[:=]?\s*|\br|#)(\d+)\b|^\s*(\d+)\b", re.I)
# What may stand between a frame id and its body: revision and lifecycle marks,
# "protected", "due-tick T", a quoted retirement reason, punctuation.
_FRAME_HEAD = re.compile(
    r"(?:[ \t]+|[:=|,—\-\[\]]|(?:rev(?:ision)?[ \t]*[:=]?[ \t]*|r|#)?\d+\b"
    r"|(?:active|retiring|retired|protected|due-tick|due|tick)\b"
    r'|reason[ \t]+"(?:[^"\\\n]|\\.)*")*',
    re.I,
)
_MAX_HEADER = 400
_PENDING = re.compile(r"^pending requests:[ \t]*(.*)$", re.M)


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one chat message: its content string or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def read_scene(compiled: CompiledInput) -> Scene:
    """Parse what *compiled* shows into a :class:`Scene`.

    Observations are the refs of ``compiled.events_present`` (or, when that is
    empty, the refs that start a line). An observation's text runs from its
    first line-leading occurrence (``@e12 …``, ``- @e12: …``,
    ``(observation @e12 …``) to the next such line, a Markdown heading or the
    end of the message; its kind is a kind word on that line or the message
    role (``user`` / ``tool``). A user request counts as delivered when that
    line says ``delivered`` (not ``undelivered``/``pending``).

    Frames are the ids of ``compiled.frames_present`` (or those written
    ``(frame ID …``). A frame's listing is an occurrence of its id followed,
    on the same line, by optional revision and lifecycle marks (``r2``,
    ``rev 2``, ``(revision 2)``, ``[active]``) and its body forms;
    ``(revision N)``, ``(from …)``, ``(sources …)`` and ``(lifecycle X)`` forms
    are read as metadata, not body. A listing with a revision mark wins over
    one without, a later one over an earlier one.
    """
    # The system message is protocol text: its examples (@e42, release) are not records.
    texts = [
        (str(m.get("role", "")), message_text(m))
        for m in compiled.messages
        if m.get("role") != "system"
    ]
    refs = [r for r in compiled.events_present if is_event_ref(r)]
    if not refs:
        lead = re.compile(rf"^{_HEADER_LEAD}({_REF_TOKEN})\b", re.M)
        refs = sorted({m.group(1) for _, t in texts for m in lead.finditer(t)}, key=ref_seq)
    frame_ids = [f for f in compiled.frames_present if is_frame_id(f)]
    if not frame_ids:
        listed = re.compile(r"(?:^|\()frame[ \t]+([^\s()\"]+)", re.M)
        frame_ids = sorted({m.group(1) for _, t in texts for m in listed.finditer(t)})
        frame_ids = [f for f in frame_ids if is_frame_id(f)]
    observations = _read_observations(texts, refs, frame_ids)
    frames = {f: _read_frame(texts, f) for f in frame_ids}
    return Scene(compiled=compiled, observations=observations, frames=frames)


def _read_observations(
    texts: list[tuple[str, str]], refs: list[str], frame_ids: list[str]
) -> tuple[Observation, ...]:
    if not refs:
        return ()
    alt = "|".join(re.escape(r) for r in sorted(refs, key=len, reverse=True))
    header = re.compile(rf"^{_HEADER_LEAD}({alt})(?![0-9])", re.M)
    anywhere = re.compile(rf"({alt})(?![0-9])")
    frame_alt = "|".join(re.escape(f) for f in sorted(frame_ids, key=len, reverse=True))
    frame_line = re.compile(
        rf"^[\-*•>\[(]*(?:\(?frame\b|(?:{frame_alt})(?=[ \t:(\[]))"
        if frame_alt
        else r"^\(?frame\b",
        re.M,
    )
    pending = _pending_requests(texts)
    # Where each ref's block starts: its first line-leading occurrence in any
    # message, else its first occurrence at all.
    blocks: dict[str, tuple[int, int, int, bool]] = {}
    for i, (_, text) in enumerate(texts):
        for m in header.finditer(text):
            blocks.setdefault(m.group(1), (i, m.start(1), m.end(1), True))
    for i, (_, text) in enumerate(texts):
        for m in anywhere.finditer(text):
            blocks.setdefault(m.group(1), (i, m.start(1), m.end(1), False))
    found: dict[str, Observation] = {}
    for ref, (i, start, end, _) in blocks.items():
        role, text = texts[i]
        stop = len(text)
        for j, other, _, headed in blocks.values():
            if j == i and other > start:
                stop = min(stop, text.rfind("\n", start, other) + 1 or other if headed else other)
        for rx in (_HEADING, frame_line):
            cut = rx.search(text, end)
            if cut is not None and cut.start() < stop:
                stop = cut.start()
        marks = _MARKS.match(text, end)
        zone = marks.group() if marks is not None else ""
        # Marks that end with a colon are a header ("@e1 user_message [main] : …").
        body_at = end + len(zone) if zone.rstrip().endswith(":") else end
        kind = _kind(zone, role)
        delivered = _delivered(zone)
        if delivered is None and pending is not None and kind == "user_message":
            delivered = ref not in pending
        found[ref] = Observation(
            ref=ref,
            text=text[body_at:stop].strip(" \t\r\n:—-"),
            kind=kind,
            delivered=delivered,
        )
    return tuple(found[r] for r in sorted(found, key=ref_seq))


def _pending_requests(texts: list[tuple[str, str]]) -> set[str] | None:
    """The refs a ``pending requests:`` runtime line names (the last one shown wins).

    An input with a ``## runtime`` section and no such line has none pending;
    an input with neither says nothing (None).
    """
    pending: set[str] | None = None
    for _, text in texts:
        if pending is None and re.search(r"^## runtime\b", text, re.M):
            pending = set()
        for m in _PENDING.finditer(text):
            value = m.group(1)
            pending = set() if value.startswith("none") else set(re.findall(_REF_TOKEN, value))
    return pending


def _kind(zone: str, role: str) -> str | None:
    m = _KIND_RX.search(zone)
    if m is not None:
        return _KIND_WORDS[m.group(1).lower()]
    return _ROLE_KINDS.get(role)


def _delivered(zone: str) -> bool | None:
    if _UNDELIVERED.search(zone):
        return False
    if _DELIVERED.search(zone):
        return True
    return None


def _read_frame(texts: list[tuple[str, str]], frame_id: str) -> FrameView:
    rx = re.compile(rf"(?<![\w./@-]){re.escape(frame_id)}(?![\w./-])")
    best: tuple[int, int, FrameView] | None = None
    order = 0
    for _, text in texts:
        for m in rx.finditer(text):
            order += 1
            view, marked = _listing(text, m.start(), m.end(), frame_id)
            if view is None:
                continue
            if best is None or (int(marked), order) > best[:2]:
                best = (int(marked), order, view)
    return best[2] if best is not None else FrameView(id=frame_id)


def _listing(text: str, start: int, end: int, frame_id: str) -> tuple[FrameView | None, bool]:
    """The frame listing that starts with the id at ``text[start:end]``, if it is one.

    The body follows the marks on the same line or, indented, on the next one.
    """
    head = _FRAME_HEAD.match(text, end, min(len(text), end + _MAX_HEADER))
    stop = head.end() if head is not None else end
    zone = text[end:stop]
    in_frame_form = re.search(r"\bframe[ \t]+$", text[max(0, start - 16) : start]) is not None
    body_at: int | None = None
    if stop < len(text) and text[stop] == "(":
        body_at = stop
    elif stop == len(text) or text[stop] in "\r\n":
        nxt = re.compile(r"\r?\n[ \t]+(?=\()").match(text, stop)
        if nxt is not None and not text.startswith("(frame", nxt.end()):
            body_at = nxt.end()
    elif text[stop] != ")":
        return None, False
    if body_at is None and not in_frame_form:
        return None, False
    marks = zone.split('"', 1)[0]  # not inside a quoted retirement reason
    m = _REVISION.search(marks)
    revision = int(m.group(1) or m.group(2)) if m is not None else None
    lifecycle = next((w for w in _LIFECYCLES if re.search(rf"\b{w}\b", marks, re.I)), None)
    forms: list[Form] = []
    if body_at is not None:
        try:
            forms = read_forms(_balanced_run(text, body_at))
        except ParseError:
            return None, False
    body: list[Form] = []
    sources: tuple[str, ...] = ()
    for form in forms:
        head_sym = form[0] if isinstance(form, tuple) and form else None
        if isinstance(head_sym, Symbol) and head_sym in _META_HEADS:
            args = form[1:]
            if head_sym in ("revision", "rev") and len(args) == 1 and isinstance(args[0], int):
                revision = args[0]
            elif head_sym in ("from", "sources"):
                sources = tuple(str(a) for a in args if isinstance(a, str))
            elif head_sym == "lifecycle" and len(args) == 1:
                lifecycle = str(args[0])
            continue
        body.append(form)
    if not body and revision is None and not in_frame_form:
        return None, False
    view = FrameView(
        id=frame_id,
        revision=revision,
        body=tuple(body),
        sources=sources,
        lifecycle=lifecycle,
    )
    return view, revision is not None or in_frame_form


def _balanced_run(text: str, pos: int) -> str:
    """The text of consecutive balanced lists starting at ``text[pos] == "("``."""
    out_end = pos
    depth = 0
    in_string = False
    i = pos
    n = len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
            if depth == 0:
                out_end = i + 1
        elif depth == 0 and not ch.isspace():
            break
        elif depth == 0 and ch == "\n":
            # A body may continue on the next line only if that line goes on with a list.
            j = i + 1
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] != "(" or text.startswith("(frame", j):
                break
        i += 1
    return text[pos:out_end]


# -- building answers -------------------------------------------------------


def sym(text: str) -> Symbol:
    """An atom."""
    return Symbol(text)


def fact(name: str, *values: Form) -> tuple[Form, ...]:
    """The form ``(name value…)``; plain ``str`` values that are not atoms stay strings."""
    return (Symbol(name), *values)


def build_tx(scene: Scene, reason: str | None, *ops: Any) -> str:
    """The canonical text of a transaction based on the scene's version."""
    return print_tx(ContextTx(base_version=scene.version, reason=reason, ops=tuple(ops)))


def tool(name: str, scene: Scene, **arguments: Any) -> ToolCall:
    """An external tool call with a deterministic call id."""
    return ToolCall(name=name, arguments=arguments, call_id=f"{name}-v{scene.version}")


Rule: TypeAlias = Callable[[Scene], ModelTurn | None]
"""A rule answers a scene with a turn, or None when it does not apply."""
Step: TypeAlias = ModelTurn | Callable[[Scene], ModelTurn | None]
PolicyFn: TypeAlias = Callable[[CompiledInput], ModelTurn | None]
Policy: TypeAlias = PolicyFn | Sequence[Step]


def first_match(*rules: Rule) -> PolicyFn:
    """A policy that reads the scene and answers with the first rule that applies."""

    def policy(compiled: CompiledInput) -> ModelTurn | None:
        scene = read_scene(compiled)
        for rule in rules:
            turn = rule(scene)
            if turn is not None:
                return turn
        return None

    return policy


_DONE = ModelTurn(finish="done")


class ScriptedModel:
    """A :class:`protocol.turns.Model` that follows a policy (see the module docstring).

    ``calls`` counts the calls answered. In maintenance mode an external tool
    action returned by the policy is dropped (transactions and memory calls
    stay); a turn left empty becomes ``done``.
    """

    def __init__(self, policy: Policy) -> None:
        if callable(policy):
            self._fn: PolicyFn | None = policy
            self._steps: tuple[Step, ...] = ()
        elif isinstance(policy, Sequence) and not isinstance(policy, (str, bytes)):
            for step in policy:
                if not (isinstance(step, ModelTurn) or callable(step)):
                    raise TypeError(f"a step is a ModelTurn or a function, not {step!r}")
            self._fn = None
            self._steps = tuple(policy)
        else:
            raise TypeError("a policy is a function of the compiled input or a list of steps")
        self.calls = 0

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        """The policy's turn for *compiled*; ``tools`` is not consulted."""
        index = self.calls
        self.calls += 1
        if self._fn is not None:
            turn = self._fn(compiled)
        elif index < len(self._steps):
            step = self._steps[index]
            turn = step if isinstance(step, ModelTurn) else step(read_scene(compiled))
        else:
            turn = None
        if turn is None:
            return _DONE
        action = turn.action
        if (
            compiled.capacity.maintenance
            and isinstance(action, ToolCall)
            and not action.is_memory_tool
        ):
            if not turn.transactions and not turn.memory_calls:
                return _DONE
            turn = turn.model_copy(update={"action": None})
        return turn


# -- rules shared by the ready policies ---------------------------------------


def sweep_rule(scene: Scene) -> ModelTurn | None:
    """In maintenance: retire observations of the batch that a listed frame already cites.

    User requests are kept unless shown delivered (R19).
    """
    if not scene.maintenance:
        return None
    cited = {s for f in scene.frames.values() for s in f.sources}
    batch = set(scene.batch)
    done = [
        o.ref
        for o in scene.observations
        if o.ref in batch and o.ref in cited and (not o.is_user or o.delivered is True)
    ]
    if not done:
        return None
    reason = "Maintenance: retire observations already captured in frames"
    return ModelTurn(transactions=(build_tx(scene, reason, Retire(refs=tuple(done))),))


def _stage(frame: FrameView | None) -> str | None:
    value = frame.get("stage") if frame is not None else None
    return str(value) if isinstance(value, str) else None


def _with_stage(
    frame: FrameView, stage: str, *extra: Form, goal: str | None = None
) -> tuple[Form, ...]:
    """The frame's body restated with a new stage (a revise replaces the whole body).

    *goal* restores a ``(goal …)`` the input did not show.
    """
    kept = [f for f in frame.without("stage") if f not in extra]
    if goal is not None and frame.get("goal") is None:
        kept.insert(0, fact("goal", sym(goal)))
    return (*kept, fact("stage", sym(stage)), *extra)


# -- release: tests → package → reply ---------------------------------------

_SHIP = re.compile(r"\bship\s+(v\d+(?:\.\d+)*)", re.I)
_PASSED = re.compile(r"\b(\d+)\s+passed\b", re.I)
_FAILED = re.compile(r"\b([1-9]\d*)\s+failed\b", re.I)
_PACKAGED = re.compile(r"\bpackag", re.I)
TESTS_PASSED = fact("tests", sym("passed"))


def _ship_request(scene: Scene) -> tuple[Observation, str] | None:
    for obs in scene.observations:
        m = _SHIP.search(obs.text)
        if m is not None and obs.kind in (None, "user_message"):
            return obs, "ship-" + m.group(1).lower()
    return None


def _goal(scene: Scene) -> str | None:
    request = _ship_request(scene)
    return request[1] if request is not None else None


def _test_report(scene: Scene) -> Observation | None:
    for obs in scene.observations:
        if not obs.is_user and _PASSED.search(obs.text):
            return obs
    return None


def _package_report(scene: Scene, exclude: Iterable[str]) -> Observation | None:
    skip = set(exclude)
    for obs in scene.observations:
        if not obs.is_user and obs.ref not in skip and _PACKAGED.search(obs.text):
            if not _PASSED.search(obs.text):
                return obs
    return None


def _plan_release(scene: Scene) -> ModelTurn | None:
    request = _ship_request(scene)
    if request is None or scene.frame("release") is not None:
        return None
    obs, goal = request
    tx = build_tx(
        scene,
        "The user asked to ship; run the regression tests first",
        Derive(
            id="release",
            sources=(obs.ref,),
            body=(fact("goal", sym(goal)), fact("stage", sym("awaiting-tests"))),
        ),
    )
    return ModelTurn(action=tool("run_tests", scene, suite="regression"), transactions=(tx,))


def _run_tests(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if release is None or _stage(release) != "awaiting-tests" or _test_report(scene):
        return None
    return ModelTurn(action=tool("run_tests", scene, suite="regression"))


def _incorporate_tests(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    report = _test_report(scene)
    if release is None or report is None or scene.frame("test-result") is not None:
        return None
    failed = _FAILED.search(report.text)
    if failed is not None:
        tx = build_tx(
            scene,
            "The regression tests failed; the release is blocked",
            Derive(
                id="test-result",
                sources=(report.ref,),
                body=(fact("tests", sym("failed")), fact("failures", int(failed.group(1)))),
            ),
            Revise(id="release", body=_with_stage(release, "blocked", goal=_goal(scene))),
            Relate(subject="test-result", label="blocks", object="release"),
            Retire(refs=(report.ref,)),
        )
        request = _ship_request(scene)
        reply = Reply(
            text=f"The regression tests failed ({failed.group(1)} failures); not packaging.",
            request_ref=request[0].ref if request else None,
        )
        return ModelTurn(action=reply, transactions=(tx,), finish="done")
    paused = _stage(release) == "paused"
    # A paused release keeps its stage: the test result is recorded, packaging waits.
    goal = _goal(scene)
    body = (
        _with_stage(release, "paused", TESTS_PASSED, goal=goal)
        if paused
        else _with_stage(release, "packaging", goal=goal)
    )
    tx = build_tx(
        scene,
        "Incorporate the test result; the release stays paused"
        if paused
        else "Incorporate the test result and prepare the release",
        Derive(id="test-result", sources=(report.ref,), body=(TESTS_PASSED,)),
        Revise(id="release", body=body),
        Relate(subject="test-result", label="supports", object="release"),
        Retire(refs=(report.ref,)),
    )
    action = None if paused else _package_call(scene, release)
    return ModelTurn(action=action, transactions=(tx,))


def _package_call(scene: Scene, release: FrameView) -> ToolCall:
    goal = release.get("goal")
    target = str(goal) if goal is not None else "release"
    return ToolCall(
        name="package",
        arguments={"target": target},
        call_id=f"package-v{scene.version}",
        irreversible=True,
        idempotency_key=f"package:{target}",
    )


def _package(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if _stage(release) != "packaging" or release is None or not scene.has("test-result"):
        return None
    request = _ship_request(scene)
    if _package_report(scene, [request[0].ref] if request else []) is not None:
        return None
    return ModelTurn(action=_package_call(scene, release))


def _packaged(scene: Scene) -> ModelTurn | None:
    release = scene.frame("release")
    if release is None or _stage(release) != "packaging":
        return None
    request = _ship_request(scene)
    report = _package_report(scene, [request[0].ref] if request else [])
    if report is None:
        return None
    tx = build_tx(
        scene,
        "The packaging tool reported success",
        Revise(
            id="release",
            sources=(report.ref,),
            body=_with_stage(release, "packaged", goal=_goal(scene)),
        ),
        Retire(refs=(report.ref,)),
    )
    goal = release.get("goal")
    reply = Reply(
        text=f"{goal if goal is not None else 'The release'}: tests passed and the package "
        "is built.",
        request_ref=request[0].ref if request else None,
    )
    return ModelTurn(action=reply, transactions=(tx,), finish="done")


def _retire_delivered(frame_id: str, stages: tuple[str, ...], pattern: re.Pattern[str]) -> Rule:
    def rule(scene: Scene) -> ModelTurn | None:
        if _stage(scene.frame(frame_id)) not in stages:
            return None
        done = [o.ref for o in scene.find_all(pattern, user=True) if o.delivered is True]
        if not done:
            return None
        reason = "The request is answered"
        return ModelTurn(transactions=(build_tx(scene, reason, Retire(refs=tuple(done))),))

    return rule


def release_policy() -> PolicyFn:
    """The seed's release story (seed 002, R10).

    1. a user message "ship vN" and no ``release`` frame → derive ``release``
       ``(goal ship-vN) (stage awaiting-tests)`` from it; action ``run_tests``;
    2. a tool result "412 passed" and no ``test-result`` → the seed's transaction:
       derive ``test-result`` from ``@eN``, revise ``release`` to
       ``(stage packaging)``, relate ``supports``, retire ``@eN``; action
       ``package`` (irreversible, idempotency key ``package:ship-vN``). If
       ``release`` is paused it stays paused with ``(tests passed)`` and there is
       no action; a report with failures blocks the release and replies;
    3. ``release`` at packaging with no packaging result yet → ``package``
       (again: the deferred action after maintenance, deduplicated by its key);
    4. a packaging result → revise ``release`` to ``(stage packaged)`` from it,
       retire it, and reply to the user's request;
    5. a request shown delivered once packaged → retire it.
    """
    return first_match(
        sweep_rule,
        _retire_delivered("release", ("packaged",), _SHIP),
        _plan_release,
        _incorporate_tests,
        _packaged,
        _package,
        _run_tests,
    )


# -- deployment: a newer configuration supersedes the target -----------------

_REGION = re.compile(r"\bregion\b\s*[=:]?\s*([a-z]{2,}-[a-z0-9-]*[a-z0-9])", re.I)
_DEPLOY_TO = re.compile(
    r"\bdeploy\w*\s+(?:\S+\s+){0,3}?(?:to|in|into)\s+([a-z]{2}-[a-z]+(?:-\d+)?)\b", re.I
)
_TARGET = re.compile(r"deployment/target-v(\d+)\Z")


def _current_target(scene: Scene) -> tuple[int, FrameView] | None:
    targets = [
        (int(m.group(1)), f)
        for fid, f in scene.frames.items()
        if (m := _TARGET.match(fid)) is not None and f.active
    ]
    return max(targets, key=lambda t: t[0]) if targets else None


def _region(frame: FrameView) -> str | None:
    for form in frame.body:
        if isinstance(form, tuple) and form and form[0] == "fact":
            for item in form[1:]:
                if isinstance(item, tuple) and len(item) == 2 and item[0] == "region":
                    return str(item[1])
    value = frame.get("region")
    return str(value) if value is not None else None


def _first_target(scene: Scene) -> ModelTurn | None:
    if any(_TARGET.match(f) for f in scene.frames):
        return None
    for obs in scene.find_all(_DEPLOY_TO, user=True):
        m = _DEPLOY_TO.search(obs.text)
        assert m is not None
        region = m.group(1).lower()
        tx = build_tx(
            scene,
            f"The user chose {region} as the deployment target",
            Derive(
                id="deployment/target-v1",
                sources=(obs.ref,),
                body=(fact("fact", fact("region", sym(region))),),
            ),
        )
        return ModelTurn(transactions=(tx,))
    return None


def _newer_configuration(scene: Scene) -> ModelTurn | None:
    current = _current_target(scene)
    if current is None:
        return None
    n, target = current
    old_region = _region(target)
    for obs in scene.find_all(_REGION, user=False):
        if obs.ref in target.sources:
            continue
        m = _REGION.search(obs.text)
        assert m is not None
        region = m.group(1).lower()
        if old_region is not None and region == old_region:
            reason = f"production configuration matches {region}"
            tx = build_tx(scene, reason, Retire(refs=(obs.ref,)))
            return ModelTurn(transactions=(tx,))
        new_id = f"deployment/target-v{n + 1}"
        if scene.frame(new_id) is not None:
            return None
        tx = build_tx(
            scene,
            f"current production configuration confirms {region}",
            Derive(
                id=new_id,
                sources=(obs.ref, target.id),
                body=(fact("fact", fact("region", sym(region))),),
            ),
            Relate(subject=new_id, label="supersedes", object=target.id),
            Retire(refs=(target.id,)),
            Retire(refs=(obs.ref,)),
        )
        return ModelTurn(transactions=(tx,))
    return None


def deployment_policy() -> PolicyFn:
    """The seed's deployment story (seed 002 / R17).

    A user message "deploy to cn-hangzhou" with no target frame derives
    ``deployment/target-v1 (fact (region cn-hangzhou))``. An observation that
    states ``region=cn-shanghai``, different from the current target's region,
    commits the seed's transaction: derive ``deployment/target-v2`` from it and
    ``deployment/target-v1``, relate ``supersedes``, retire both (the old target
    retires at once through its successor). A configuration that matches the
    current target is just retired. No tool actions.
    """
    return first_match(sweep_rule, _first_target, _newer_configuration)


# -- consolidation: release cases → release procedure -------------------------

_CASE = re.compile(r"release-case-[\w.\-]+\Z")
_STEPS = "After tests pass, build, verify this run's artifacts, then package."
_APPLICABILITY = "Check the current project layout and scripts before choosing a branch."


def _branch(case: FrameView) -> tuple[Form, ...]:
    layout = case.get("layout")
    name = str(layout) if isinstance(layout, Symbol) else case.id.rsplit("/", 1)[-1]
    return (sym(name), *case.without("layout", "outcome", "result"))


def _consolidate(scene: Scene) -> ModelTurn | None:
    if scene.frame("release-procedure") is not None:
        return None
    cases = sorted(f for f, v in scene.frames.items() if _CASE.match(f) and v.active)
    if len(cases) < 2:
        return None
    branches = tuple(_branch(scene.frames[c]) for c in cases)
    body = (
        fact("steps", _STEPS),
        *branches,
        fact("applicability", _APPLICABILITY),
    )
    ops: list[Any] = [Derive(id="release-procedure", sources=tuple(cases), body=body)]
    ops += [Relate(subject="release-procedure", label="supersedes", object=c) for c in cases]
    ops.append(Retire(refs=tuple(cases)))
    reason = (
        "Consolidate two release experiences into a reusable procedure"
        if len(cases) == 2
        else f"Consolidate {len(cases)} release experiences into a reusable procedure"
    )
    return ModelTurn(transactions=(build_tx(scene, reason, *ops),))


def consolidation_policy() -> PolicyFn:
    """The seed's consolidation story (seed 002, R17, R34).

    With two or more active ``release-case-*`` frames and no
    ``release-procedure``: derive ``release-procedure`` from the cases with the
    shared steps, one branch per case (named by its ``(layout X)``, holding its
    other fields), and the applicability note; relate it ``supersedes`` each
    case and retire the cases (they retire at once through the successor).
    The model writes the body; the runtime never summarizes (R34).
    """
    return first_match(sweep_rule, _consolidate)


# -- pause: a user pause that must hold both facts after a conflict -----------

_PAUSE = re.compile(r"\bpause\b|暂停", re.I)


def _pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    release = scene.frame("release")
    if request is None or release is None or _stage(release) == "paused":
        return None
    extra: list[Form] = []
    sources = [request.ref]
    tests = scene.frame("test-result")
    if tests is not None and tests.get("tests") == "passed":
        extra.append(TESTS_PASSED)
        sources.append("test-result")
    previous = _stage(release)
    if previous is not None and release.get("resume-at") is None:
        extra.append(fact("resume-at", sym(previous)))
    tx = build_tx(
        scene,
        "The user asked to pause the release",
        Revise(id="release", sources=tuple(sources), body=_with_stage(release, "paused", *extra)),
    )
    return ModelTurn(transactions=(tx,))


def _confirm_pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    release = scene.frame("release")
    if request is None or _stage(release) != "paused" or request.delivered is True:
        return None
    assert release is not None
    held = " Tests passed; packaging waits." if TESTS_PASSED in release.body else ""
    return ModelTurn(
        action=Reply(text=f"The release is paused.{held}", request_ref=request.ref),
        finish="done",
    )


def _nothing_to_pause(scene: Scene) -> ModelTurn | None:
    request = scene.find(_PAUSE, user=True)
    if request is None or scene.frame("release") is not None or request.delivered is True:
        return None
    return ModelTurn(
        action=Reply(text="There is no release in progress to pause.", request_ref=request.ref),
        finish="done",
    )


def pause_policy() -> PolicyFn:
    """The seed's concurrent pause (seed 002, R24).

    A user message "pause the release" with ``release`` not paused → revise
    ``release`` restating every fact it can see with ``(stage paused)``, the
    previous stage as ``(resume-at X)``, and ``(tests passed)`` when a
    ``test-result`` frame says so (then listed in ``from``, so the runtime
    checks it). If that transaction is rejected for a conflict, the next call
    reads the newer state and rebuilds it, so "tests passed" and "paused" are
    both held. Once ``release`` shows paused → reply to the request.
    """
    return first_match(
        sweep_rule,
        _retire_delivered("release", ("paused",), _PAUSE),
        _pause,
        _confirm_pause,
        _nothing_to_pause,
    )


__all__ = [
    "FrameView",
    "Observation",
    "Policy",
    "PolicyFn",
    "Rule",
    "Scene",
    "ScriptedModel",
    "Step",
    "build_tx",
    "consolidation_policy",
    "deployment_policy",
    "fact",
    "first_match",
    "message_text",
    "pause_policy",
    "read_scene",
    "release_policy",
    "sweep_rule",
    "sym",
    "tool",
]
