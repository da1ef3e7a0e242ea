"""Typed replies that cross a port: what a remote context answers, as frozen models.

A context behind a port (the Ray actor today) answers plain msgpack maps; the
client decodes each fixed-shape answer into one of these models, so a reply
that does not have the documented shape fails at the boundary
(:class:`~protocol.errors.WireError`), not three calls later.

Every model is also a read-only mapping (see :class:`Reply`): ``reply["ref"]``,
``reply.get("due_tick")``, ``"as_of" in reply``, ``dict(reply)`` and
``reply == {...}`` behave as they did on the plain dicts these replies were
before, with exactly the keys the sender sent (an optional field that was not
sent is not a key). Lists stay lists and nested maps stay maps, so values
compare equal to what the embedded API returns. The decision is recorded in
docs/actors.md.

The embedded API (:class:`service.context.Context`) answers the same models for
the same calls, so a script moves between an embedded context and a Ray handle
unchanged (docs/api.md has the table). :func:`plain` turns a reply (or a list or
map holding replies) back into plain values for msgpack and JSON.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.errors import WireError

R = TypeVar("R", bound="Reply")


class Reply(BaseModel, Mapping[str, Any]):
    """A frozen reply model (unknown keys refused) with read-only mapping access.

    The mapping holds the fields the sender set, by name: ``keys()`` is
    ``model_fields_set`` in declaration order, ``reply[key]`` raises KeyError
    for a field that was not sent. Attribute access (``reply.ref``) is the
    typed form; optional fields that were not sent read as ``None`` there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    @classmethod
    def decode(cls: type[R], value: Any) -> R:
        """The reply a decoded wire value describes; WireError if it has another shape."""
        if not isinstance(value, dict):
            raise WireError(f"malformed {cls.__name__}: expected a map, got {type(value).__name__}")
        try:
            return cls.model_validate(value)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or cls.__name__
            raise WireError(f"malformed {cls.__name__}: {where}: {err.get('msg')}") from e

    @classmethod
    def of(cls: type[R], value: Mapping[str, Any]) -> R:
        """The reply a service builds from *value*: validated like :meth:`decode`, but a
        mismatch is a bug of the sender, so pydantic's error propagates unchanged."""
        return cls.model_validate(dict(value))

    def as_dict(self) -> dict[str, Any]:
        """The reply as the plain dict it was sent as (only the keys that were sent)."""
        return {key: getattr(self, key) for key in self.keys()}

    def to_dict(self) -> dict[str, Any]:
        """The same as :meth:`as_dict`: the name the other models (receipts) use."""
        return self.as_dict()

    def keys(self) -> list[str]:  # type: ignore[override]
        """The keys that were sent, in declaration order."""
        sent = self.model_fields_set
        return [name for name in type(self).model_fields if name in sent]

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.model_fields_set)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.model_fields_set

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Reply):
            return type(self) is type(other) and self.as_dict() == other.as_dict()
        if isinstance(other, Mapping):
            return self.as_dict() == dict(other)
        return NotImplemented


class ObserveReply(Reply):
    """One recorded observation: its reference, its event id, and whether that id
    was recorded before (a retried or repeated observation answers the first)."""

    ref: str
    id: str
    duplicate: bool


class DeliverReply(Reply):
    """A user request marked delivered (R19): its reference and event id."""

    ref: str
    id: str
    delivered: bool


class ClaimReply(Reply):
    """One claimed input batch: the tick after it, the refs claimed, the frames
    finalized at the new tick, and the version after it."""

    tick: int
    advanced: bool
    claimed: list[str]
    finalized: list[str]
    version: int


class ObserveClaimReply(Reply):
    """An observation recorded and the input batch claimed with it, in one write: the
    observation's reference, event id and ``duplicate`` (as :class:`ObserveReply`), then
    the claim's tick, ``advanced``, refs claimed, frames finalized and version after it
    (as :class:`ClaimReply`)."""

    ref: str
    id: str
    duplicate: bool
    tick: int
    advanced: bool
    claimed: list[str]
    finalized: list[str]
    version: int


class FrameReply(Reply):
    """A frame as the API shows it. ``due_tick``, ``marked_tick`` and
    ``retire_reason`` are sent while it is retiring, ``retired_version`` once
    retired, ``relations_in``/``relations_out`` unless an as-of read
    (``as_of``) left them out; ``forgotten_sources`` names the sources whose
    content was forgotten (``docs/forget.md``)."""

    id: str
    revision: int
    body: str
    body_forms: list[Any]
    sources: list[str]
    lifecycle: str
    protected: bool
    created_version: int
    updated_version: int
    tokens: int
    due_tick: int | None = None
    marked_tick: int | None = None
    retire_reason: str | None = None
    retired_version: int | None = None
    envelope: dict[str, Any]
    relations_out: list[list[str]] | None = None
    relations_in: list[list[str]] | None = None
    as_of: int | None = None
    forgotten_sources: list[str] | None = None


class EventReply(Reply):
    """An event's metadata; ``delivered`` is sent for user messages only, ``forgotten``
    (the tombstone) once its text was forgotten."""

    ref: str
    id: str
    kind: str
    session: str
    time: float
    size: int
    tokens: int
    lifecycle: str
    claimed_tick: int | None
    preview: str
    delivered: bool | None = None
    forgotten: dict[str, Any] | None = None


class EventPage(Reply):
    """Characters ``[offset, offset + length)`` of an event's original text; ``more``
    says whether text follows."""

    ref: str
    id: str
    offset: int
    length: int
    size: int
    more: bool
    text: str


class StateReply(Reply):
    """The whole context at one version: every frame, event and relation (as the
    summaries ``morphz state`` prints), the sessions and the waiting inputs."""

    context: str
    version: int
    tick: int
    window: int
    frames: list[dict[str, Any]]
    events: list[dict[str, Any]]
    relations: list[list[str]]
    sessions: list[dict[str, Any]]
    waiting: list[str]


class MetaReply(Reply):
    """The context's counters: version, tick, window, next event number, how much
    history is kept, when it was created, its tenant and project, and how it is served
    (``settings``: cadences, admission, embedder, enforcement; None until recorded)."""

    version: int
    tick: int
    window: int
    next_seq: int
    history_keep: int
    created: float
    tenant: str | None
    project: str | None
    settings: dict[str, Any] | None = None
    branches: dict[str, Any] | None = None
    """Sent when the context has a fork origin, merges or tags (docs/branches.md)."""


class SnapshotReply(Reply):
    """One consistent read of the version, the tick and some frames: each frame id
    maps to ``{"revision", "lifecycle", "protected"}``, or None when absent."""

    version: int
    tick: int
    frames: dict[str, dict[str, Any] | None]


class UpdateReadReply(Reply):
    """What a writer bases its next transaction on, from one consistent read: the
    version, the tick and, per frame id, ``{"revision", "version", "lifecycle",
    "protected", "body", "body_forms"}``, or None when absent."""

    version: int
    tick: int
    frames: dict[str, dict[str, Any] | None]


class HistoryEntry(Reply):
    """One committed write of a frame, from the transaction log (R29).

    ``op`` is the operation (``derive``, ``revise`` …) or ``lifecycle`` for a
    lifecycle-only change; ``revision`` and ``body`` are sent when that write
    set them (``body`` for a model's transaction, as it wrote it)."""

    version: int
    base_version: int
    kind: str
    reason: str | None
    op: str
    revision: int | None = None
    body: str | None = None


class SearchReply(Reply):
    """A model's search recorded as a ``recall_result`` observation: its reference,
    the number of hits, the frame ids found and how many committed updates the
    index had not applied yet (``lag``); a hybrid search also sends
    ``semantic_lag`` and, when the embedder failed, ``degraded``."""

    ref: str
    hits: int
    recalled: list[str]
    lag: int
    semantic_lag: int | None = None
    """Hybrid search only: updates not embedded yet (None if unknown)."""
    degraded: str | None = None
    """Hybrid search only, when the semantic side did not answer: why (``code: message``)."""
    results: list[dict[str, Any]] | None = None
    """The hits themselves, best first, as ``morphz search --json`` prints them (id, type,
    kind, lifecycle, score, snippet, time; trust for frames, signals when hybrid), so no
    port makes its client fetch each one."""


class RecallReply(Reply):
    """One recall page recorded as a ``recall_result`` observation: its reference,
    the page's node and edge counts, the frame ids on it and the cursor of the
    next page (None on the last)."""

    ref: str
    nodes: int
    edges: int
    recalled: list[str]
    next_cursor: str | None


class DecisionReply(Reply):
    """A governance ruling on one frame: its ``verdict`` (``accept``, ``reject``,
    ``hold``), why, and who decided (``policy:<name>`` or ``human:<reviewer>``)."""

    frame: str
    verdict: str
    reasons: list[str]
    reviewer: str


class AdmitReply(Reply):
    """One admission run: every decision, oldest candidate first, and the version it
    committed at (None when it decided only holds and wrote nothing)."""

    decisions: list[DecisionReply]
    version: int | None


class ReviewReply(Reply):
    """A human review: the decision and the version it committed at."""

    decision: DecisionReply
    version: int | None


with warnings.catch_warnings():
    # The key is ``items``, as it always was on every port: as an attribute it names the
    # list, so read this reply's pairs with ``dict(reply)``, not ``reply.items()``.
    warnings.simplefilter("ignore", UserWarning)

    class PendingReply(Reply):
        """What awaits a human or admission, read at ``version``: held candidates with
        the policy's reasons and quarantined frames with their findings (``items``)."""

        version: int
        items: list[dict[str, Any]] = Field(...)  # type: ignore[assignment]


class FindingReply(Reply):
    """A low-quality frame a scan found: which, by which rule (``contradicted``,
    ``failing_procedure``, ``unused``, ``sensitive_content``) and why."""

    frame: str
    rule: str
    detail: str


class SensitiveReply(Reply):
    """Sensitive content a scan located (never the secret: ``excerpt`` is masked): the
    record (``frame`` or ``observation``), its id and reference, the field and offsets,
    the rule that matched, what the scan did (``action``) and what to do (``remedy``)."""

    record: str
    id: str
    ref: str
    field: str
    start: int
    end: int
    rule: str
    name: str
    category: str
    excerpt: str
    action: str
    remedy: str


class ScanReply(Reply):
    """One quarantine scan: every finding, the frames it quarantined, the ones it spared
    (a human accepted them), the version it committed at (None: nothing written) and the
    sensitive content it located in frames and observations."""

    findings: list[FindingReply]
    quarantined: list[str]
    spared: list[str]
    version: int | None
    sensitive: list[SensitiveReply]


class Counter(int):
    """An int that is also callable, answering itself as a plain int.

    ``ctx.version()`` and ``ctx.tick()`` are the forms an embedded context and
    a Ray handle share; the embedded context's bare ``ctx.version`` (the form
    it had first) is kept as a deprecated alias by answering a ``Counter``, so
    old code and f-strings keep reading the number (docs/api.md). Reading it
    bare — comparing, formatting, adding, converting it without calling it —
    warns once per process with a ``DeprecationWarning``.
    """

    def __call__(self) -> int:
        return int.__int__(self)


_BARE_WARNED = False
"""Whether this process was told once that a bare counter is deprecated."""


def _warn_bare() -> None:
    global _BARE_WARNED
    if not _BARE_WARNED:
        _BARE_WARNED = True
        warnings.warn(
            "reading ctx.version / ctx.tick bare is deprecated: call it, ctx.version()",
            DeprecationWarning,
            stacklevel=3,
        )


def _bare(name: str) -> Any:
    method = getattr(int, name)

    def use(self: Counter, *args: Any) -> Any:
        _warn_bare()
        return method(self, *args)

    use.__name__ = name
    return use


for _name in (
    "__abs__ __add__ __and__ __bool__ __ceil__ __divmod__ __eq__ __float__ __floor__"
    " __floordiv__ __format__ __ge__ __gt__ __hash__ __index__ __int__ __invert__ __le__"
    " __lshift__ __lt__ __mod__ __mul__ __ne__ __neg__ __or__ __pos__ __pow__ __radd__"
    " __rand__ __rdivmod__ __repr__ __rfloordiv__ __rlshift__ __rmod__ __rmul__ __ror__"
    " __round__ __rpow__ __rrshift__ __rshift__ __rsub__ __rtruediv__ __rxor__ __str__"
    " __sub__ __truediv__ __trunc__ __xor__"
).split():
    setattr(Counter, _name, _bare(_name))


def plain(value: Any) -> Any:
    """*value* with every reply in it (at any depth in lists, tuples and dicts) as its
    plain dict, and counters as ints: what msgpack and JSON take."""
    if isinstance(value, Reply):
        return {key: plain(item) for key, item in value.as_dict().items()}
    if isinstance(value, Counter):
        return value()
    if isinstance(value, BaseModel):  # a model that is no reply (a receipt, a compiled input)
        to_dict = getattr(value, "to_dict", None)  # its own JSON form, where it has one
        return plain(to_dict()) if callable(to_dict) else value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # an Event
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


__all__ = [
    "AdmitReply",
    "ClaimReply",
    "Counter",
    "DecisionReply",
    "DeliverReply",
    "EventPage",
    "EventReply",
    "FindingReply",
    "FrameReply",
    "HistoryEntry",
    "MetaReply",
    "ObserveClaimReply",
    "ObserveReply",
    "PendingReply",
    "RecallReply",
    "Reply",
    "ReviewReply",
    "ScanReply",
    "SearchReply",
    "SensitiveReply",
    "SnapshotReply",
    "StateReply",
    "UpdateReadReply",
    "plain",
]
