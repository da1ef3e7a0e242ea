"""Deciding one context transaction: :func:`evaluate`.

The steps, in order: the exactly-once check (R25) and the base version and
footprint check (R21–R24) in :mod:`~protocol.engine.conflicts`; the
operations in order (R7) on an overlay, in :mod:`~protocol.engine.operations`;
the successor rule (R17) in :mod:`~protocol.engine.lifecycle`; then the
receipt, changeset and log record in :mod:`~protocol.engine.records`. The
first refusal ends the decision with nothing written (R8).
"""

from __future__ import annotations

from protocol.engine.conflicts import check_base, check_client, tx_digest
from protocol.engine.lifecycle import successor_rule
from protocol.engine.operations import HANDLERS, apply_operation
from protocol.engine.overlay import Decision, OpFailure, Overlay
from protocol.engine.records import Outcome, commit, reject
from protocol.ids import SUPERSEDES
from protocol.receipts import OpError
from protocol.tx import ContextTx
from protocol.view import ReadView


def evaluate(view: ReadView, tx: ContextTx, *, now: float, text: str | None = None) -> Outcome:
    """Decide one transaction against *view*; on commit, return what to write.

    *text* is the transaction's S-expression as submitted, kept in the log;
    when None the transaction's dict form is logged instead.
    """
    meta = view.meta()
    digest = b""
    if tx.client_id is not None:
        digest = tx_digest(tx)
        seen = check_client(view, meta, tx, digest)
        if seen is not None:
            return seen
    refused = check_base(view, meta, tx)
    if refused is not None:
        return refused
    rebased = tx.base_version < meta.version

    d = Decision(Overlay(view), meta, tx, meta.version + 1)
    for index, op in enumerate(tx.ops):
        try:
            HANDLERS.get(type(op), apply_operation)(d, op, index)
        except OpFailure as failure:
            return reject(
                meta,
                tx,
                errors=(
                    OpError(op=index, code=failure.code, message=f"{op.op}: {failure.message}"),
                ),
            )

    candidates = d.marked | d.sourced | d.supersede_objects
    for s in d.restored_subjects:
        for label, o in view.relations_from(s):
            if label == SUPERSEDES:
                candidates.add(o)
    successor_rule(d.ov, candidates, d.version)

    return commit(d, rebased, digest, now, text)
