"""The commit rules of a context, as pure functions from a read view to a changeset.

Every function here reads a :class:`~protocol.view.ReadView`, decides, and
returns a :class:`~protocol.view.Changeset` describing the writes; nothing is
mutated until a store applies the changeset. A rejected transaction therefore
writes nothing at all (R8): validation happens entirely on an overlay.

* :func:`evaluate` — a context transaction: exactly-once check (R25), base
  version and footprint check (R21–R24), operations in order (R7), the
  successor rule (R17), lifecycle effects and capacity relief (R9, R31).
* :func:`claim` — claim the waiting inputs as one batch, advance the tick once
  if the batch holds an external fact (R20), and finalize due retirements as
  a recorded runtime transaction (R12, R16).
* :func:`observe` and :func:`deliver` — record an observation; mark a user
  request delivered, which lifts its causal protection (R19).

The modules, each one concern:

====================  ===========================================================
``evaluation``        :func:`evaluate`, the steps in order
``conflicts``         exactly once, base version, footprint conflicts
``operations``        one function per operation
``overlay``           the copy-on-write overlay and the decision's state
``lifecycle``         the successor rule, the consolidation window (``finalize_due``)
``records``           receipt, changeset, log record, outbox
``inputs``            observe, claim, deliver; event references
====================  ===========================================================
"""

from protocol.engine.conflicts import tx_digest
from protocol.engine.evaluation import evaluate
from protocol.engine.inputs import (
    MAX_EVENT_CHARS,
    MAX_SESSION,
    ClaimResult,
    claim,
    deliver,
    observe,
    resolve_event,
    source_ref,
)
from protocol.engine.lifecycle import finalize_due
from protocol.engine.operations import MODEL_SETTABLE_TRUST, UNREVIEWED_EVENT_KINDS
from protocol.engine.records import Outcome

__all__ = [
    "ClaimResult",
    "MAX_EVENT_CHARS",
    "MAX_SESSION",
    "MODEL_SETTABLE_TRUST",
    "Outcome",
    "UNREVIEWED_EVENT_KINDS",
    "claim",
    "deliver",
    "evaluate",
    "finalize_due",
    "observe",
    "resolve_event",
    "source_ref",
    "tx_digest",
]
