"""What a scripted model reads in a compiled input: a :class:`Scene` (R38).

A :class:`Scene` is what a model would read in the input: the observations
present (``@e12`` and their text), the frames present (id, revision, body,
sources when shown), the version to base transactions on
(``CompiledInput.version``), the tick and the maintenance flag. It is parsed
from the messages text, tolerating the usual layouts (see :func:`read_scene`):
a policy written against a scene keeps working when the compiler's wording
changes. Pure: no I/O, no Ray.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ParseError
from protocol.forms import Form, Symbol
from protocol.ids import is_event_ref, is_frame_id, ref_seq
from protocol.sexpr import read_forms
from protocol.state import EVENT_KINDS
from protocol.turns import CompiledInput

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


__all__ = ["FrameView", "Observation", "Scene", "message_text", "read_scene"]
