"""Receipts (R9): what every submitted transaction gets back, committed or rejected.

Error codes in :class:`OpError` are stable strings; see :data:`ERROR_CODES`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from protocol.models import trusted

ERROR_CODES = {
    "conflict": "something the transaction references changed after its base version",
    "too_old": "the base version is older than the history kept for conflict checks",
    "future_base": "the base version is newer than the context",
    "client_id_reused": "the client id was used by a different committed transaction",
    "unknown_ref": "no frame or event has this id or reference",
    "frame_exists": "derive names a frame that already exists",
    "retired_frame": "the frame is retired; restore it first",
    "protected": "the frame is protected; unprotect it first",
    "causally_protected": "the user request is not delivered yet (R19)",
    "unknown_relation": "unrelate names an edge that does not exist",
    "not_a_frame": "the operation needs a frame, not an event",
    "self_source": "a frame cannot list itself as a source",
    "not_keyed": "a field edit names a frame whose body is not a set of fields",
    "not_a_number": "incr names a field that does not hold one integer",
    "counter_overflow": "incr would leave the signed 64-bit range",
    "work_limit": "the field edits of one transaction would copy more than MAX_EDIT_WORK forms",
}


MAX_CHANGES_LISTED = 256
"""Most versions a rejection's ``changed_since_base`` covers: when more lie between the base
and the rejection, the list is empty and the writer reads again."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OpError(_Model):
    """Why a transaction was rejected: the failing operation's index (None: the whole tx)."""

    op: int | None
    code: str
    message: str


class Conflict(_Model):
    """A referenced id that changed after the base version, and the version that changed it.

    ``field`` names the field of frame ``id`` that collided when a ``set`` or ``unset``
    was refused because that field changed (absent from the JSON form otherwise).
    """

    id: str
    version: int
    field: str | None = None

    @model_serializer(mode="wrap")
    def _drop_no_field(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("field") is None:
            out.pop("field", None)
        return out


class Edit(_Model):
    """What happened to one field edit of a committed transaction.

    ``op`` is its index in the transaction, ``revision`` the frame's revision it made.
    ``outcome`` is ``applied`` (the base was the current version), ``rebased`` (the
    base was older but nothing changed the frame since) or ``merged`` (the frame
    changed after the base, and the edit was applied to that newer revision).
    """

    op: int
    id: str
    field: str
    revision: int
    outcome: Literal["applied", "rebased", "merged"]


class Current(_Model):
    """A frame as it stands now, carried by a rejected receipt so the writer can rebuild
    without a read: its revision, the version that last changed it (``version``), its
    lifecycle and its body as S-expression text (None when the frame does not exist)."""

    id: str
    version: int
    revision: int | None = None
    lifecycle: str | None = None
    body: str | None = None


class Retiring(_Model):
    """A frame now in its consolidation window, due at ``due_tick``."""

    id: str
    due_tick: int


class Relief(_Model):
    """Input capacity released: observation refs, frame ids and estimated tokens."""

    events: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    tokens: int = 0


class Receipt(_Model):
    """The outcome of one submission (R9).

    ``version`` is the version the transaction committed at, or the context's
    current version when rejected. ``rebased`` is true only for a commit whose
    base was older than the version it committed at; a rejection is never
    rebased (it applied nothing). ``duplicate`` is true when a resubmission
    with a known client id returned the original receipt (R25).

    So that a rejected writer rebuilds without a separate read, a ``conflict``
    rejection carries in ``current`` each conflicting frame as it stands now,
    to rebuild on ``version``, and lists in ``changed_since_base`` every frame
    other transactions wrote after the base, up to ``version`` (id and the last
    version that wrote it, sorted by id; empty when more than
    :data:`MAX_CHANGES_LISTED` versions lie between). Both are empty on other
    receipts, and absent from receipts written before they existed. ``edits`` says, for
    each field edit of a committed transaction, whether it was applied, rebased or
    merged (:class:`Edit`); it is absent from the JSON form when empty. A commit's
    receipt does not list what changed since its base: reading the log for it
    made group commits several times slower (docs/actors.md).
    """

    status: Literal["committed", "rejected"]
    version: int
    base_version: int
    rebased: bool = False
    client_id: str | None = None
    duplicate: bool = False
    tick: int = 0
    retired_now: tuple[str, ...] = ()
    retiring: tuple[Retiring, ...] = ()
    retirement_cancelled: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    relief_now: Relief = Relief()
    relief_pending: Relief = Relief()
    errors: tuple[OpError, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    changed_since_base: tuple[Conflict, ...] = ()
    current: tuple[Current, ...] = ()
    edits: tuple[Edit, ...] = ()

    @property
    def committed(self) -> bool:
        """True if the transaction was committed."""
        return self.status == "committed"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the CLI prints this)."""
        out = self.model_dump(mode="json")
        if not out["edits"]:
            del out["edits"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Receipt:
        """Inverse of :meth:`to_dict`; raises pydantic's ValidationError on bad input."""
        return cls.model_validate(data)


_NO_RELIEF = trusted(Relief, {"events": (), "frames": (), "tokens": 0})
"""The relief of a receipt that releases nothing: frozen, so one instance serves them all."""


def _relief(events: list[str], frames: list[str], tokens: int) -> Relief:
    if not events and not frames and not tokens:
        return _NO_RELIEF
    return trusted(Relief, {"events": tuple(events), "frames": tuple(frames), "tokens": tokens})


def committed_receipt(
    *,
    version: int,
    base_version: int,
    rebased: bool,
    client_id: str | None,
    tick: int,
    retired_now: list[str],
    retiring: list[tuple[str, int]],
    cancelled: list[str],
    restored: list[str],
    now_events: list[str],
    now_frames: list[str],
    now_tokens: int,
    pending_frames: list[str],
    pending_tokens: int,
    edits: tuple[tuple[int, str, str, int, str], ...] = (),
) -> tuple[Receipt, dict[str, Any]]:
    """A committed receipt built from trusted engine values, and its JSON form."""
    doc: dict[str, Any] = {
        "status": "committed",
        "version": version,
        "base_version": base_version,
        "rebased": rebased,
        "client_id": client_id,
        "duplicate": False,
        "tick": tick,
        "retired_now": retired_now,
        "retiring": [{"id": i, "due_tick": d} for i, d in retiring] if retiring else [],
        "retirement_cancelled": cancelled,
        "restored": restored,
        "relief_now": {"events": now_events, "frames": now_frames, "tokens": now_tokens},
        "relief_pending": {"events": [], "frames": pending_frames, "tokens": pending_tokens},
        "errors": [],
        "conflicts": [],
        "changed_since_base": [],
        "current": [],
    }
    if edits:
        doc["edits"] = [
            {"op": i, "id": f, "field": n, "revision": r, "outcome": o} for i, f, n, r, o in edits
        ]
    receipt = trusted(
        Receipt,
        {
            "status": "committed",
            "version": version,
            "base_version": base_version,
            "rebased": rebased,
            "client_id": client_id,
            "duplicate": False,
            "tick": tick,
            "retired_now": tuple(retired_now),
            "retiring": tuple(trusted(Retiring, {"id": i, "due_tick": d}) for i, d in retiring)
            if retiring
            else (),
            "retirement_cancelled": tuple(cancelled),
            "restored": tuple(restored),
            "relief_now": _relief(now_events, now_frames, now_tokens),
            "relief_pending": _relief([], pending_frames, pending_tokens),
            "errors": (),
            "conflicts": (),
            "changed_since_base": (),
            "current": (),
            "edits": tuple(
                trusted(Edit, {"op": i, "id": f, "field": n, "revision": r, "outcome": o})
                for i, f, n, r, o in edits
            )
            if edits
            else (),
        },
    )
    return receipt, doc


def without_reads(doc: dict[str, Any]) -> dict[str, Any]:
    """A receipt's dict form as a caller without ``read`` may see it: the conflicting
    frames' bodies (``current``) and the ids changed since the base left out (the
    conflicts themselves name only frames the caller's own transaction touched)."""
    if not doc.get("current") and not doc.get("changed_since_base"):
        return doc
    return {**doc, "current": [], "changed_since_base": []}
