"""The pure rules of Morphz: ids, frames, events, relations, the transaction language,
the msgpack/JSON wire forms, validation, lifecycle and conflict checks.

Nothing in this package does I/O or imports ``storage``, ``actors`` or ``ray``.
"""

from protocol.compiler import Compiler, CompilerConfig, compile_input
from protocol.context import Backend, Context
from protocol.engine import ClaimResult, Outcome, claim, deliver, evaluate, observe
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    StoreLocked,
    WireError,
)
from protocol.forms import Symbol
from protocol.governance import (
    AdmissionPolicy,
    Decision,
    DefaultPolicy,
    GovernanceWorker,
    audit_template,
    find_low_quality,
    read_audit,
    run_admission,
    run_pass,
    run_quarantine,
    run_quarantine_scan,
    run_review,
)
from protocol.history import Submission, Verdict, Violation, check_history
from protocol.memory import MemoryBackend
from protocol.recall import RecallPage, RecallRequest, recall
from protocol.receipts import Conflict, OpError, Receipt, Relief, Retiring
from protocol.state import Event, Frame, Meta
from protocol.tx import (
    ContextTx,
    Derive,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
)
from protocol.txlang import parse_tx, print_form, print_tx, read_forms
from protocol.view import Changeset, ReadView, WriteView
from protocol.wire import (
    pack,
    tx_from_dict,
    tx_from_json,
    tx_from_msgpack,
    tx_to_dict,
    tx_to_json,
    tx_to_msgpack,
    unpack,
)

__all__ = [
    "AdmissionPolicy",
    "Backend",
    "Changeset",
    "ClaimResult",
    "Compiler",
    "CompilerConfig",
    "Conflict",
    "Context",
    "ContextTx",
    "Decision",
    "DefaultPolicy",
    "Derive",
    "Event",
    "Frame",
    "GovernanceWorker",
    "MemoryBackend",
    "Meta",
    "MorphzError",
    "NotFound",
    "OpError",
    "OutOfRange",
    "Outcome",
    "ParseError",
    "Protect",
    "ReadView",
    "RecallPage",
    "RecallRequest",
    "Receipt",
    "Relate",
    "Relief",
    "RequestError",
    "Restore",
    "Retire",
    "Retiring",
    "Revise",
    "StoreError",
    "StoreLocked",
    "Submission",
    "Symbol",
    "Unprotect",
    "Unrelate",
    "Verdict",
    "Violation",
    "WireError",
    "WriteView",
    "audit_template",
    "check_history",
    "claim",
    "compile_input",
    "deliver",
    "evaluate",
    "find_low_quality",
    "observe",
    "pack",
    "parse_tx",
    "print_form",
    "print_tx",
    "read_audit",
    "read_forms",
    "recall",
    "run_admission",
    "run_pass",
    "run_quarantine",
    "run_quarantine_scan",
    "run_review",
    "tx_from_dict",
    "tx_from_json",
    "tx_from_msgpack",
    "tx_to_dict",
    "tx_to_json",
    "tx_to_msgpack",
    "unpack",
]
