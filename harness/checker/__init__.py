"""A checker of multi-threaded histories (R21–R25), in the spirit of Jepsen's Elle.

A history is what the clients saw — one :class:`Submission` per submitted
transaction, with its receipt or with no reply at all — together with what the
store kept: the transaction log, the events and the final state of frames and
relations. :func:`check_history` proves six properties of it and returns a
:class:`Verdict` listing every :class:`Violation` found:

(a) **Replay.** The log versions are exactly ``1..N``; replaying the log in
    version order on a fresh in-memory store re-commits every record at its
    version with the same changes, writes and receipt (``replay_diverged``),
    and ends in exactly the final state: every frame's full record, every
    relation, every event's lifecycle (``replay_mismatch``). A log that is not
    ``1..N`` is reported as ``log_gap`` and not replayed.
(b) **No lost update.** No committed transaction — neither a committed
    submission nor a model log record — has a footprint key changed by a
    version strictly between its base version and its commit version
    (``lost_update``). Event references cited as sources are not checked,
    exactly as the engine's conflict check skips them.
(c) **Justified rejections.** Each conflict a ``conflict`` rejection names is
    in the submission's footprint and was changed, according to the log, by
    the version named, after the base and no later than the rejection
    (``unjustified_conflict``). A ``too_old`` rejection really was more than
    ``history_keep`` versions behind (``unjustified_too_old``).
(d) **Exactly once.** No client id appears on more than one log record
    (``duplicate_apply``).
(e) **Durable acknowledgements.** Every committed submission's version is in
    the log under its client id, and every receipt for one client id names the
    same version (``lost_ack``). A submission with an unknown outcome may have
    committed at most once — (d) — and is otherwise not checked.
(f) **Field edits.** A ``set`` or ``unset`` commits only if its field, the
    frame's whole body and its lifecycle did not change between its base and
    its commit, and an ``append``, ``remove`` or ``incr`` only if the lifecycle
    did not (``lost_update``, told from the frames before and after each
    replayed version); and every edited frame's final fields are what its
    logged edits make of them, in order (``lost_edit``: an append lost or
    applied twice), rebuilt from the log by :mod:`~harness.checker.fields`.

How the replay works: a fresh :class:`~storage.memory.MemoryBackend` gets the
context's window and ``history_keep`` and every event, reset to active and not
retired. User requests are marked delivered: delivery is not logged, so the
replay cannot know when it happened, and a logged retirement of a request
could only have committed after its delivery. Then, for each record in version
order, the tick moves to the record's tick; a ``model`` record's transaction
(parsed from its text, or from its dict form) is evaluated by
:func:`protocol.engine.evaluate` and a ``runtime`` record is replayed by
:func:`protocol.engine.finalize_due` at its tick. The replay store keeps no
client-id index, so a duplicate client id in the log is reported by (d) and
does not also derail the replay. The replay stops at the first record that
does not commit at its version or finalizes other frames; the final state is
then not compared.

Everything here is pure: no I/O, and the store is the in-memory one. The
modules: :mod:`~harness.checker.verdicts` (submissions in, violations and the
verdict out), :mod:`~harness.checker.log` (reading the log),
:mod:`~harness.checker.replay` (a) and :mod:`~harness.checker.checks`
(:func:`check_history`, (b)–(e)).
"""

from harness.checker.checks import check_history
from harness.checker.verdicts import (
    DUPLICATE_APPLY,
    LOG_GAP,
    LOST_ACK,
    LOST_EDIT,
    LOST_UPDATE,
    REPLAY_DIVERGED,
    REPLAY_MISMATCH,
    UNJUSTIFIED_CONFLICT,
    UNJUSTIFIED_TOO_OLD,
    VIOLATION_KINDS,
    Counts,
    Submission,
    Verdict,
    Violation,
)

__all__ = [
    "DUPLICATE_APPLY",
    "LOG_GAP",
    "LOST_ACK",
    "LOST_EDIT",
    "LOST_UPDATE",
    "REPLAY_DIVERGED",
    "REPLAY_MISMATCH",
    "UNJUSTIFIED_CONFLICT",
    "UNJUSTIFIED_TOO_OLD",
    "VIOLATION_KINDS",
    "Counts",
    "Submission",
    "Verdict",
    "Violation",
    "check_history",
]
