"""Whether a transaction may be decided at all: exactly once, and against which base.

Before any operation runs, a transaction is checked against the context as
it is now:

* :func:`check_client` — a client id seen before (R25): the same content is a
  retry and gets the original receipt back, marked ``duplicate``; other
  content is refused (``client_id_reused``);
* :func:`check_base` — its base version (R21–R24): newer than the context is
  refused (``future_base``), further behind than the kept history is refused
  (``too_old``), and behind but with a footprint key changed since the base
  is refused (``conflict``, naming each key and the version that changed it,
  :func:`footprint_conflicts`, and carrying the changed frames as they stand
  now, :func:`current_frames`); behind with nothing changed is a rebase.
"""

from __future__ import annotations

import hashlib
from typing import Any

from protocol.engine.records import Outcome, changed_since, reject
from protocol.receipts import Conflict, Current, OpError, Receipt
from protocol.sexpr import print_form
from protocol.state import Meta
from protocol.tx import ContextTx, Derive, Relate, Retire, Revise, Unrelate, key_display
from protocol.view import ReadView


def tx_digest(tx: ContextTx) -> bytes:
    """A digest of a transaction's content, to tell a retry from a reused client id.

    It is the digest of ``repr(tx.model_dump())``, which stores keep for every client
    id, so it must not change; :func:`_dump` builds that same value without
    pydantic's serializer, which infers the type of every atom of a body.
    """
    return hashlib.blake2b(repr(_dump(tx)).encode(), digest_size=16).digest()


def _dump(tx: ContextTx) -> dict[str, Any]:
    """``tx.model_dump()``, equal to it value for value (tests check it on every op type)."""
    ops: list[dict[str, Any]] = []
    for op in tx.ops:
        cls = type(op)
        if cls is Derive or cls is Revise:
            assert isinstance(op, (Derive, Revise))
            ops.append({"op": op.op, "id": op.id, "sources": op.sources, "body": op.body})
        elif cls is Relate or cls is Unrelate:
            assert isinstance(op, Relate)
            ops.append({"op": op.op, "subject": op.subject, "label": op.label, "object": op.object})
        elif cls is Retire:
            assert isinstance(op, Retire)
            ops.append({"op": op.op, "refs": op.refs})
        else:
            ops.append(op.model_dump())
    return {
        "base_version": tx.base_version,
        "reason": tx.reason,
        "client_id": tx.client_id,
        "ops": tuple(ops),
    }


def check_client(view: ReadView, meta: Meta, tx: ContextTx, digest: bytes) -> Outcome | None:
    """The outcome for *tx* if its client id was used before; None if it was not.

    *digest* is ``tx_digest(tx)``; *tx* has a client id.
    """
    assert tx.client_id is not None
    known = view.client(tx.client_id)
    if known is None:
        return None
    version, old_digest = known
    if old_digest == digest:
        record = view.txlog(version)
        assert record is not None, "client index points at a missing log record"
        original = Receipt.from_dict(record["receipt"])
        return Outcome(original.model_copy(update={"duplicate": True}), None)
    return reject(
        meta,
        tx,
        errors=(
            OpError(
                op=None,
                code="client_id_reused",
                message=f"client id {tx.client_id!r} was used by the transaction "
                f"committed at version {version} with different content",
            ),
        ),
    )


def check_base(view: ReadView, meta: Meta, tx: ContextTx) -> Outcome | None:
    """The rejection of *tx* if its base version cannot be decided on; None if it can."""
    base = tx.base_version
    if base > meta.version:
        return reject(
            meta,
            tx,
            errors=(
                OpError(
                    op=None,
                    code="future_base",
                    message=f"base version {base} is newer than the context "
                    f"(version {meta.version})",
                ),
            ),
        )
    if base < meta.version:
        if meta.version - base > meta.history_keep:
            return reject(
                meta,
                tx,
                errors=(
                    OpError(
                        op=None,
                        code="too_old",
                        message=f"base version {base} is more than {meta.history_keep} versions "
                        f"behind {meta.version}; re-read the context and rebuild the transaction",
                    ),
                ),
            )
        found = footprint_conflicts(view, tx, base)
        if found:
            shown = ", ".join(
                f"{c.id} (v{c.version})"
                if c.field is None
                else f"{c.field} of {c.id} (v{c.version})"
                for c in found
            )
            return reject(
                meta,
                tx,
                errors=(
                    OpError(
                        op=None,
                        code="conflict",
                        message=f"changed after base version {base}: {shown}",
                    ),
                ),
                conflicts=found,
                current=current_frames(view, tx, base),
                changed_since_base=tuple(
                    Conflict(id=i, version=v) for i, v in changed_since(view, base, meta.version)
                ),
            )
    return None


def current_frames(view: ReadView, tx: ContextTx, base: int) -> tuple[Current, ...]:
    """The frames of *tx*'s footprint changed after *base*, as they stand now, sorted by id.

    A rejected writer rebuilds its transaction from these and the receipt's version
    instead of reading again. A frame that no longer exists has no body.
    """
    reads, writes = tx.footprint()
    frames: dict[str, int] = {}
    for key in reads | writes:
        if key[:2] in ("f:", "b:", "l:"):
            changed_at = view.lastmod(key)
            if changed_at > base:
                fid = key_display(key)
                frames[fid] = max(frames.get(fid, 0), changed_at)
    out: list[Current] = []
    for fid in sorted(frames):
        key = "f:" + fid
        changed_at = max(frames[fid], view.lastmod(key))
        f = view.frame(fid)
        if f is None:
            out.append(Current(id=key_display(key), version=changed_at))
            continue
        out.append(
            Current(
                id=f.id,
                version=changed_at,
                revision=f.revision,
                lifecycle=f.lifecycle,
                body=" ".join(print_form(x) for x in f.body),
            )
        )
    return tuple(out)


def footprint_conflicts(view: ReadView, tx: ContextTx, base: int) -> tuple[Conflict, ...]:
    """The footprint keys of *tx* changed after version *base*, sorted, with when (R23, R24).

    A field key (``set``/``unset`` of a field that changed) is reported with its
    frame id and the ``field``; a body rewritten as a whole or a lifecycle change
    is reported by frame id alone, once per frame.
    """
    reads, writes = tx.footprint()
    # An event's content never changes; only its lifecycle does. Citing an event as
    # a source therefore cannot conflict: only retire/restore of the same event can.
    keys = writes | {k for k in reads if not k.startswith("e:")}
    found: dict[tuple[str, str | None], int] = {}
    for key in sorted(keys):
        changed_at = view.lastmod(key)
        if changed_at > base:
            name = (key.partition("\x00")[2] or None) if key[:2] == "b:" else None
            at = (key_display(key), name)
            found[at] = max(found.get(at, 0), changed_at)
    return tuple(
        Conflict(id=i, version=v) if n is None else Conflict(id=i, version=v, field=n)
        for (i, n), v in found.items()
    )
