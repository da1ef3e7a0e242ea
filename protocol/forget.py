"""Forgetting content: what a tombstone looks like and which records must be rewritten (pure).

Forgetting erases the *content* of one record — an observation's text or every
body a frame ever had — and keeps the record: its id, its place in the log,
the frames that cite it. What stays is a :class:`Tombstone`: the digest of the
erased content (:func:`content_digest`, ``sha256:`` and 64 hex digits), who
forgot it, when and why. The rules here are functions of their inputs; the
service (:mod:`service.forget`) reads the records, the store rewrites them.

* an observation's text becomes :func:`event_tombstone_text`, its preview the
  same, its ``extra["forgotten"]`` the tombstone (:func:`tombstone_event`);
* a frame's body becomes :func:`frame_tombstone_body` — one form,
  ``(forgotten "sha256:…")`` — in its current record and in every history row,
  its envelope gains ``forgotten`` (:func:`tombstone_frame`);
* every ``model`` log record whose operation wrote that body is rewritten so
  that it holds the tombstone body instead (:func:`redact_log_record`): a fork,
  which replays the log, then rebuilds the tombstone, never the content;
* a ``recall_result`` observation that carried the content (a recall or search
  that returned it, :func:`carries`) is forgotten with it;
* a transaction's ``reason`` that quotes the content (:func:`needles`: the
  observation's text, or each string of the frame's body, of at least
  :data:`MIN_NEEDLE` characters) is scrubbed in its log record
  (:func:`scrub_reason`); other frames whose body still holds it are only
  reported (:func:`holds`), for the caller to forget too.

Forgetting is not a transaction a model can emit: it rewrites history rather
than adding to it, so it is a governance operation (``admin`` through the
actor) and leaves the version unchanged. See ``docs/forget.md``.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from protocol.errors import RequestError
from protocol.forms import Form, Symbol
from protocol.replies import Reply
from protocol.state import Event, Frame, estimate_tokens
from protocol.tx import ContextTx, Derive, FieldOp, RemoveField, Revise

FORGOTTEN = "forgotten"
"""The head of a tombstone form, and the key of the tombstone in an event's ``extra``
and a frame's envelope."""
MAX_REASON = 512
"""Longest reason accepted, in characters (what the audit log keeps)."""
MAX_BY = 256
"""Longest name of whoever forgets, in characters."""
DIGEST_PREFIX = "hmac-sha256:"
"""The prefix of a tombstone's digest: keyed (HMAC-SHA256 under the context's erasure key)."""

_DIGEST_RE = re.compile(r"(?:hmac-sha256|sha256):[0-9a-f]{64}\Z")  # sha256: before keying


class ForgetReport(Reply):
    """What a forget did, the same from the embedded API, the Ray handle and the CLI.

    ``target`` is the reference as the model reads it (``@eN`` or the frame
    id), ``id`` the stable id; ``digest``, ``by``, ``at``, ``reason`` the
    tombstone; ``version`` the context's version (unchanged by forgetting);
    ``duplicate`` is true when the record was forgotten before (nothing was
    written; the first tombstone is answered); ``cascade`` lists the
    ``recall_result`` observations that carried the content and were forgotten
    with it; ``log_versions`` the log records rewritten; ``history_rows`` the
    frame history rows rewritten; ``scrubbed`` the versions whose reason quoted
    the content and was scrubbed; ``still_in`` the other frames whose current body
    still holds it (not changed: forget them too if they must go), at most
    :data:`MAX_STILL_IN`.
    """

    target: str
    kind: str
    id: str
    digest: str
    by: str
    at: float
    reason: str
    version: int
    duplicate: bool = False
    cascade: list[str] = []
    log_versions: list[int] = []
    history_rows: int = 0
    scrubbed: list[int] = []
    still_in: list[str] = []


@dataclass(slots=True, frozen=True)
class Tombstone:
    """What remains of forgotten content: its digest, who forgot it, when and why."""

    digest: str
    by: str
    at: float
    reason: str

    def to_record(self) -> dict[str, Any]:
        """The plain form kept in an event's ``extra`` and a frame's envelope."""
        return {"digest": self.digest, "by": self.by, "at": self.at, "reason": self.reason}

    @classmethod
    def from_record(cls, rec: Any) -> Tombstone | None:
        """The tombstone a stored plain form describes; None if it is not one."""
        if not isinstance(rec, dict):
            return None
        digest, by, at, reason = rec.get("digest"), rec.get("by"), rec.get("at"), rec.get("reason")
        if not (isinstance(digest, str) and isinstance(by, str) and isinstance(reason, str)):
            return None
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            return None
        return cls(digest, by, float(at), reason)


@dataclass(slots=True)
class Rewrite:
    """Records a forget overwrites in place, beside its changeset.

    ``contents``: ``(seq, text)`` — an event's text replaced whole (every old
    chunk goes); ``history``: frame history rows ``(frame id, version, record)``
    overwritten; ``txlog``: log records overwritten (each names its version).
    """

    contents: list[tuple[int, str]] = field(default_factory=list)
    history: list[tuple[str, int, Frame]] = field(default_factory=list)
    txlog: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class RewriteView(Protocol):
    """A write view that can overwrite records in place (both stores offer it)."""

    def rewrite(self, rw: Rewrite) -> None:
        """Overwrite the records *rw* names, inside the current write."""


def check_reason(reason: object) -> str:
    """The reason of a forget, stripped; RequestError ``missing_reason`` / ``bad_argument``."""
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        raise RequestError(
            "forgetting needs a reason (why this content must go), e.g. --reason 'leaked key'",
            code="missing_reason",
        )
    if not isinstance(reason, str):
        raise RequestError("a reason is text", code="bad_argument")
    reason = reason.strip()
    if len(reason) > MAX_REASON:
        raise RequestError(
            f"a reason is at most {MAX_REASON} characters, not {len(reason)}", code="bad_argument"
        )
    return reason


def check_by(by: object) -> str:
    """Who forgets: 1 to :data:`MAX_BY` printable characters; RequestError ``bad_argument``."""
    if not isinstance(by, str) or not 1 <= len(by) <= MAX_BY or not by.isprintable():
        raise RequestError(
            f"who forgets is named by 1 to {MAX_BY} printable characters", code="bad_argument"
        )
    return by


def content_digest(key: bytes, text: str) -> str:
    """The digest a tombstone keeps of erased text: ``hmac-sha256:`` and the hex HMAC-SHA256
    of its UTF-8 under the context's erasure *key*.

    Keyed, so nobody can test a guess (a phone number, a short secret) against a
    tombstone without the key, which lives outside the store and can be destroyed
    (:func:`storage.keys.destroy_erasure_key`); a plain hash of short text is found by
    trying every candidate. With the key, the holder can still check that a text
    was the one erased.
    """
    return (
        DIGEST_PREFIX + hmac.new(key, text.encode("utf-8", "surrogatepass"), "sha256").hexdigest()
    )


def body_text(body: tuple[Form, ...]) -> str:
    """A frame body as printed (what a frame's digest is taken of)."""
    from protocol.sexpr import print_form

    return " ".join(print_form(f) for f in body)


def event_tombstone_text(digest: str) -> str:
    """The text a forgotten observation reads as: ``(forgotten sha256:…)``."""
    return f"({FORGOTTEN} {digest})"


def frame_tombstone_body(digest: str) -> tuple[Form, ...]:
    """The body a forgotten frame holds: the one form ``(forgotten "sha256:…")``."""
    return ((Symbol(FORGOTTEN), digest),)


def is_tombstone_body(body: tuple[Form, ...]) -> bool:
    """True if *body* is a tombstone body."""
    if len(body) != 1:
        return False
    form = body[0]
    return (
        isinstance(form, tuple)
        and len(form) == 2
        and isinstance(form[0], Symbol)
        and form[0] == FORGOTTEN
        and isinstance(form[1], str)
        and not isinstance(form[1], Symbol)
        and bool(_DIGEST_RE.match(form[1]))
    )


def event_tombstone(e: Event) -> Tombstone | None:
    """The tombstone of a forgotten event; None if it was not forgotten."""
    return Tombstone.from_record(e.extra.get(FORGOTTEN))


def frame_tombstone(f: Frame) -> Tombstone | None:
    """The tombstone of a forgotten frame; None if it was not forgotten."""
    return Tombstone.from_record(f.envelope.get(FORGOTTEN))


def tombstone_event(e: Event, stone: Tombstone) -> tuple[Event, str]:
    """*e* forgotten: its new record and its new text (the tombstone text)."""
    text = event_tombstone_text(stone.digest)
    w = e.copy()
    w.preview = text
    w.size = len(text)
    w.tokens = estimate_tokens(text)
    w.extra[FORGOTTEN] = stone.to_record()
    return w, text


def tombstone_frame(f: Frame, stone: Tombstone) -> Frame:
    """*f* (a current record or a history row) forgotten: the tombstone body and envelope mark.

    Revision, versions, sources and lifecycle stay as they were.
    """
    w = f.copy()
    w.body = frame_tombstone_body(stone.digest)
    w.envelope[FORGOTTEN] = stone.to_record()
    return w


def _logged_tx(record: dict[str, Any]) -> ContextTx:
    if record.get("text") is not None:
        from protocol.txlang import parse_tx

        return parse_tx(record["text"], legacy=True)
    from protocol.txwire import tx_from_dict

    return tx_from_dict(record["tx"])


def redact_log_record(
    record: dict[str, Any], frame_id: str, body: tuple[Form, ...]
) -> dict[str, Any] | None:
    """*record* with every operation that wrote *frame_id*'s body now writing *body*.

    Only ``model`` records carry bodies (runtime and governance records name
    frames, never bodies). None when *record* wrote no body of *frame_id*. The
    text is reprinted canonically (``print_tx``), or the dict form rewritten,
    whichever the record kept, so replaying it yields *body*.
    """
    if record.get("kind") != "model":
        return None
    writes = [
        w for w in record.get("writes") or () if isinstance(w, dict) and w.get("frame") == frame_id
    ]
    indexes = {w["index"] for w in writes if isinstance(w.get("index"), int)}
    edited = any(isinstance(w.get("field"), str) for w in writes)
    if not indexes and not edited:
        return None
    tx = _logged_tx(record)
    ops = list(tx.ops)
    changed = False
    for i in sorted(indexes):
        if i < len(ops):
            op = ops[i]
            if isinstance(op, (Derive, Revise)) and op.id == frame_id and op.body != body:
                ops[i] = op.model_copy(update={"body": body})
                changed = True
    if edited:
        # A field edit carried content too: it becomes an edit that changes nothing of the
        # tombstone body (removing a value the tombstone does not hold), so the replay
        # still makes one revision there, never refused where the original was not.
        for i, op in enumerate(ops):
            if isinstance(op, FieldOp) and op.id == frame_id and op.field != FORGOTTEN:
                ops[i] = RemoveField(
                    id=frame_id, sources=op.sources, field=FORGOTTEN, values=(Symbol("redacted"),)
                )
                changed = True
    if not changed:
        return None
    new_tx = tx.model_copy(update={"ops": tuple(ops)})
    out = dict(record)
    if record.get("text") is not None:
        from protocol.txlang import print_tx

        out["text"] = print_tx(new_tx)
    else:
        from protocol.txwire import tx_to_dict

        out["tx"] = tx_to_dict(new_tx)
    return out


MIN_NEEDLE = 8
"""Shortest piece of forgotten content looked for in reasons and other bodies (characters):
shorter ones ("yes", a digit) would match what has nothing to do with it."""
MAX_NEEDLES = 64
"""Most pieces of one forgotten body looked for."""
MAX_STILL_IN = 100
"""Most other frames a forget reports as still holding the content."""
SCRUBBED = "[forgotten]"
"""What a scrubbed quote of forgotten content reads in a reason."""


def needles(*, text: str | None = None, body: tuple[Form, ...] | None = None) -> list[str]:
    """The pieces of forgotten content to look for elsewhere: an observation's whole
    *text*, or each string in a frame's *body* (nested forms too), each of at least
    :data:`MIN_NEEDLE` characters, at most :data:`MAX_NEEDLES`, longest first."""
    found: list[str] = []
    if text is not None:
        found.append(text.strip())
    stack: list[Any] = list(body or ())
    while stack and len(found) < 4 * MAX_NEEDLES:
        item = stack.pop()
        if isinstance(item, str) and not isinstance(item, Symbol):
            found.append(item.strip())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    unique = sorted({n for n in found if len(n) >= MIN_NEEDLE}, key=lambda n: (-len(n), n))
    return unique[:MAX_NEEDLES]


def scrub_reason(record: dict[str, Any], pieces: list[str]) -> dict[str, Any] | None:
    """*record* (a log record) with each of *pieces* in its ``reason`` replaced by
    :data:`SCRUBBED`, in the record's reason and in the transaction it keeps (reprinted
    as it was kept); None when its reason quotes none of them."""
    reason = record.get("reason")
    if not isinstance(reason, str) or not any(p in reason for p in pieces):
        return None
    for piece in pieces:
        reason = reason.replace(piece, SCRUBBED)
    out = dict(record)
    out["reason"] = reason
    if record.get("text") is not None or record.get("tx") is not None:
        tx = _logged_tx(record).model_copy(update={"reason": reason})
        if record.get("text") is not None:
            from protocol.txlang import print_tx

            out["text"] = print_tx(tx)
        else:
            from protocol.txwire import tx_to_dict

            out["tx"] = tx_to_dict(tx)
    return out


def holds(body: tuple[Form, ...], pieces: list[str]) -> bool:
    """Whether a frame *body* still holds one of *pieces*: in one of its strings or
    atoms, or across them in its printed text."""
    printed = body_text(body)
    atoms: list[str] = []
    stack: list[Any] = list(body)
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            atoms.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return any(p in printed or any(p in a for a in atoms) for p in pieces)


def carries(e: Event, text: str, *, frame_id: str | None = None, ref: str | None = None) -> bool:
    """True if the ``recall_result`` observation *e* (text *text*) carried forgotten content.

    It did if it recalled frame *frame_id* (``extra["recalled"]``) or names
    *frame_id* or the event reference *ref* in its text (a recall page or a
    search hit quotes what it found). Deliberately broad: a recall result is
    derived tool output, and keeping one that quoted the content would keep
    the content.
    """
    if e.kind != "recall_result" or event_tombstone(e) is not None:
        return False
    if frame_id is not None:
        if frame_id in (e.extra.get("recalled") or ()):
            return True
        if re.search(r"(?<![\w:/.-])" + re.escape(frame_id) + r"(?![\w:/.-])", text):
            return True
    if ref is not None and re.search(re.escape(ref) + r"(?![0-9])", text):
        return True
    return False


def forget_audit(
    *,
    kind: str,
    target: str,
    record_id: str,
    stone: Tombstone,
    cascade: list[str],
    holder: str | None,
    context: str | None,
    tenant: str | None,
) -> dict[str, Any]:
    """The audit entry of one forget (method ``forget``, op ``admin``), written in its write."""
    from protocol.governance import audit_entry

    return audit_entry(
        "forget",
        "admin",
        holder=holder if holder is not None else stone.by,
        allowed=True,
        why=stone.reason,
        at=stone.at,
        outcome="allowed",
        context=context,
        tenant=tenant,
        target=target,
        kind=kind,
        id=record_id,
        digest=stone.digest,
        by=stone.by,
        cascade=list(cascade),
    )
