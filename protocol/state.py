"""The records a context is made of: frames, events, and the context's meta counters.

These are plain slotted dataclasses, not pydantic models: they live inside the
commit path, where every microsecond counts, and they never cross a trust
boundary without going through :mod:`protocol.wire` or the store's own codec.
``to_record``/``from_record`` give the closed, msgpack-ready form the store
persists.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from protocol.forms import Form, Symbol
from protocol.ids import event_ref

ACTIVE = "active"
RETIRING = "retiring"
RETIRED = "retired"

LEDGER = "ledger"
EVENT_KINDS = ("user_message", "tool_result", "external", "recall_result", LEDGER)
"""Kinds of observation. ``user_message``, ``tool_result`` and ``external`` are external
facts that advance the tick; ``recall_result`` is retrieved memory; ``ledger`` records
the intent and result of an irreversible action (R43) and is never in a model's input."""
TICK_KINDS = frozenset({"user_message", "tool_result", "external"})

DEFAULT_WINDOW = 8
DEFAULT_HISTORY_KEEP = 100_000
PREVIEW_CHARS = 240

KINDS = ("working", "episodic", "semantic", "procedural", "meta")
"""Memory kinds of the envelope (R41); a frame is ``working`` unless told otherwise."""
CANDIDATE = "candidate"
ACCEPTED = "accepted"
REJECTED = "rejected"
TRUST_RETIRED = "retired"
QUARANTINED = "quarantined"
TRUST = (CANDIDATE, ACCEPTED, REJECTED, TRUST_RETIRED, QUARANTINED)
"""Trust statuses: R41's four plus ``quarantined`` (R43), see ``docs/governance.md``."""
HIDDEN_TRUST = frozenset({REJECTED, QUARANTINED})
"""Trust statuses that keep a frame out of every compiled input."""
RISKS = ("low", "medium", "high")


def default_envelope() -> dict[str, Any]:
    """The envelope of a frame that says nothing about itself (and of old records)."""
    return {
        "kind": "working",
        "tenant": None,
        "project": None,
        "valid_from": None,
        "valid_to": None,
        "trust": ACCEPTED,
        "reviewed_by": None,
        "review_reasons": [],
        "keys": [],
        "risk": "low",
        "session": None,
        "created_tick": None,
    }


@dataclass(slots=True)
class Meta:
    """The context's counters. ``version`` counts committed transactions; ``tick`` batches."""

    version: int = 0
    tick: int = 0
    window: int = DEFAULT_WINDOW
    next_seq: int = 1
    history_keep: int = DEFAULT_HISTORY_KEEP
    created: float = 0.0
    tenant: str | None = None
    project: str | None = None
    settings: dict[str, Any] | None = None
    """How the context is served (cadences, admission, embedder, enforcement): written by
    the port that serves it, so a restart, a restore or a promotion serves it the same.
    Plain JSON values; never a secret. None until a port records them."""
    branches: dict[str, Any] | None = None
    """Where the context comes from and what it merged (a fork's origin and version, the
    last merge from each source) and its tags (docs/branches.md). Replaced, never
    mutated in place: copies share it."""

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "version": self.version,
            "tick": self.tick,
            "window": self.window,
            "next_seq": self.next_seq,
            "history_keep": self.history_keep,
            "created": self.created,
            "tenant": self.tenant,
            "project": self.project,
        }
        if self.settings is not None:
            rec["settings"] = self.settings
        if self.branches is not None:
            rec["branches"] = self.branches
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Meta:
        return cls(**rec)

    def copy(self) -> Meta:
        return Meta(
            self.version,
            self.tick,
            self.window,
            self.next_seq,
            self.history_keep,
            self.created,
            self.tenant,
            self.project,
            None if self.settings is None else dict(self.settings),
            self.branches,
        )


@dataclass(slots=True)
class Frame:
    """A frame (R3). ``sources`` hold stable ids: frame ids and event ids (``ev:…``).

    ``envelope`` is the governance envelope (R41) as a closed dict with every
    key of :func:`default_envelope`; ``valid_from``/``valid_to`` are epoch seconds.
    """

    id: str
    revision: int
    body: tuple[Form, ...]
    sources: tuple[str, ...]
    lifecycle: str = ACTIVE
    protected: bool = False
    created_version: int = 0
    updated_version: int = 0
    retire_gen: int = 0
    due_tick: int | None = None
    marked_tick: int | None = None
    retire_reason: str | None = None
    retired_version: int | None = None
    envelope: dict[str, Any] = field(default_factory=default_envelope)

    @property
    def tokens(self) -> int:
        """Estimated input tokens of the body (computed, not stored)."""
        return form_tokens(self.body)

    @property
    def trust(self) -> str:
        """The trust status of the envelope (``accepted`` by default)."""
        return str(self.envelope.get("trust", ACCEPTED))

    @property
    def kind(self) -> str:
        """The memory kind of the envelope (``working`` by default)."""
        return str(self.envelope.get("kind", "working"))

    def valid_at(self, t: float) -> bool:
        """True if valid time *t* lies in ``[valid_from, valid_to)`` (open ends unbounded)."""
        lo, hi = self.envelope.get("valid_from"), self.envelope.get("valid_to")
        return (lo is None or lo <= t) and (hi is None or t < hi)

    def to_record(self) -> dict[str, Any]:
        rec = self.record_for_encoding()
        if rec["envelope"] is self.envelope:
            rec["envelope"] = _copy_envelope(self.envelope)
        return rec

    def record_for_encoding(self) -> dict[str, Any]:
        """:meth:`to_record` for encoding at once: equal to it, but it shares the
        envelope with this frame instead of copying it (when its key and reason lists
        are lists, as the copy would make them), so it must not be kept or changed."""
        env = self.envelope
        if type(env.get("keys")) is not list or type(env.get("review_reasons")) is not list:
            env = _copy_envelope(env)
        return {
            "id": self.id,
            "revision": self.revision,
            "body": [_plain(f) for f in self.body],
            "sources": list(self.sources),
            "lifecycle": self.lifecycle,
            "protected": self.protected,
            "created_version": self.created_version,
            "updated_version": self.updated_version,
            "retire_gen": self.retire_gen,
            "due_tick": self.due_tick,
            "marked_tick": self.marked_tick,
            "retire_reason": self.retire_reason,
            "retired_version": self.retired_version,
            "envelope": env,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Frame:
        rec = dict(rec)
        rec["body"] = tuple(_form(f) for f in rec["body"])
        rec["sources"] = tuple(rec["sources"])
        # Records written before the envelope existed load with the defaults.
        rec["envelope"] = {**default_envelope(), **(rec.get("envelope") or {})}
        return cls(**rec)

    def copy(self) -> Frame:
        return Frame(
            self.id,
            self.revision,
            self.body,
            self.sources,
            self.lifecycle,
            self.protected,
            self.created_version,
            self.updated_version,
            self.retire_gen,
            self.due_tick,
            self.marked_tick,
            self.retire_reason,
            self.retired_version,
            _copy_envelope(self.envelope),
        )


def _copy_envelope(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    out["keys"] = list(env.get("keys") or ())
    out["review_reasons"] = list(env.get("review_reasons") or ())
    return out


@dataclass(slots=True)
class Event:
    """An observation's metadata (R2). Its content is immutable and stored apart."""

    seq: int
    id: str
    kind: str
    session: str
    time: float
    size: int
    tokens: int
    preview: str
    lifecycle: str = ACTIVE
    delivered: bool | None = None
    claimed_tick: int | None = None
    retired_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """The short reference the model uses, ``@e<seq>``."""
        return event_ref(self.seq)

    @property
    def causally_protected(self) -> bool:
        """An undelivered user request cannot be retired (R19)."""
        return self.kind == "user_message" and self.delivered is False

    def to_record(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.id,
            "kind": self.kind,
            "session": self.session,
            "time": self.time,
            "size": self.size,
            "tokens": self.tokens,
            "preview": self.preview,
            "lifecycle": self.lifecycle,
            "delivered": self.delivered,
            "claimed_tick": self.claimed_tick,
            "retired_version": self.retired_version,
            "extra": self.extra,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Event:
        return cls(**rec)

    def copy(self) -> Event:
        return Event(
            self.seq,
            self.id,
            self.kind,
            self.session,
            self.time,
            self.size,
            self.tokens,
            self.preview,
            self.lifecycle,
            self.delivered,
            self.claimed_tick,
            self.retired_version,
            dict(self.extra),
        )


def _plain(form: Form) -> Any:
    cls = type(form)  # the common types by exact type first; subclasses below
    if cls is Symbol:
        return str(form)
    if cls is tuple:
        return [_plain(x) for x in form]
    if cls is int:
        return form
    if isinstance(form, Symbol):
        return str(form)
    if isinstance(form, str):
        return {"s": form}
    if isinstance(form, tuple):
        return [_plain(x) for x in form]
    return form


def _form(value: Any) -> Form:
    # Trusted decode of what _plain wrote; untrusted input goes through forms.from_plain.
    if isinstance(value, str):
        return Symbol(value)
    if isinstance(value, dict):
        return value["s"]
    if isinstance(value, list):
        return tuple(_form(x) for x in value)
    return value


def estimate_tokens(text: str) -> int:
    """A tokenizer-free token estimate that counts CJK sensibly.

    Each CJK ideograph, kana or hangul syllable counts as one token; the rest
    counts one token per four characters (rounded up). It is the documented
    default of the pluggable tokenizer and needs nothing from the network.
    """
    if text.isascii():
        return (len(text) + 3) // 4
    wide = 0
    for ch in text:
        if ord(ch) >= 0x2E80 and unicodedata.east_asian_width(ch) in ("W", "F"):
            wide += 1
    return wide + (len(text) - wide + 3) // 4


def form_tokens(forms: tuple[Form, ...]) -> int:
    """Estimated tokens of a frame body as printed."""
    total = 0
    stack: list[Any] = list(forms)
    while stack:
        f = stack.pop()
        if isinstance(f, tuple):
            total += 1
            stack.extend(f)
        elif isinstance(f, str):
            total += estimate_tokens(f) + (0 if isinstance(f, Symbol) else 1)
        else:
            total += 1
    return total


def preview_of(text: str) -> str:
    """The first characters of an event, for previews."""
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[:PREVIEW_CHARS] + "…"
