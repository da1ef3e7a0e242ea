"""The pure rules of Morphz: ids, frames, events, relations, the transaction language,
the msgpack/JSON wire forms, validation, lifecycle and conflict checks.

Nothing in this package does I/O or imports ``storage``, ``actors`` or ``ray``.
"""

from protocol.compiler import Compiler, CompilerConfig, compile_input
from protocol.engine import ClaimResult, Outcome, claim, deliver, evaluate, observe
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    Overloaded,
    ParseError,
    RequestError,
    StoreError,
    StoreLocked,
    TransportError,
    WireError,
)
from protocol.forms import Symbol
from protocol.governance import (
    AdmissionPolicy,
    Decision,
    DefaultPolicy,
    PassCursor,
    Ruling,
    apply_plan,
    audit_template,
    find_low_quality,
    plan_pass,
)
from protocol.recall import RecallPage, RecallRequest, recall
from protocol.receipts import Conflict, OpError, Receipt, Relief, Retiring
from protocol.sexpr import print_form, read_forms
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
from protocol.txlang import parse_tx, print_tx
from protocol.txwire import (
    SubmittedTx,
    submitted_from_dict,
    submitted_from_json,
    submitted_from_msgpack,
    tx_from_dict,
    tx_from_json,
    tx_from_msgpack,
    tx_to_dict,
    tx_to_json,
    tx_to_msgpack,
)
from protocol.view import Changeset, ReadView, WriteView
from protocol.wire import pack, unpack

__all__ = [
    "AdmissionPolicy",
    "Changeset",
    "ClaimResult",
    "Compiler",
    "CompilerConfig",
    "Conflict",
    "ContextTx",
    "Decision",
    "DefaultPolicy",
    "Derive",
    "Event",
    "Frame",
    "Meta",
    "MorphzError",
    "NotFound",
    "OpError",
    "OutOfRange",
    "Outcome",
    "Overloaded",
    "ParseError",
    "PassCursor",
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
    "Ruling",
    "StoreError",
    "StoreLocked",
    "SubmittedTx",
    "Symbol",
    "TransportError",
    "Unprotect",
    "Unrelate",
    "WireError",
    "WriteView",
    "apply_plan",
    "audit_template",
    "claim",
    "compile_input",
    "deliver",
    "evaluate",
    "find_low_quality",
    "observe",
    "pack",
    "parse_tx",
    "plan_pass",
    "print_form",
    "print_tx",
    "read_forms",
    "recall",
    "submitted_from_dict",
    "submitted_from_json",
    "submitted_from_msgpack",
    "tx_from_dict",
    "tx_from_json",
    "tx_from_msgpack",
    "tx_to_dict",
    "tx_to_json",
    "tx_to_msgpack",
    "unpack",
]
