"""The application service: the one :class:`Context` API every port calls.

The CLI, the embedded API (``import morphz``), the Ray context actor and the servers
all reach memory through this package: observe, claim, commit, reads, recall, search,
governance runs, fork, import/export of frames, compile and traces. It depends on
:mod:`protocol` (the rules) and :mod:`storage` (persistence), never on a port.
"""

from service.context import Context
from service.governance import (
    GovernanceWorker,
    apply_pass,
    read_audit,
    record_audit,
    run_admission,
    run_pass,
    run_quarantine,
    run_quarantine_scan,
    run_review,
)
from service.protocol_text import PROTOCOL_TEXT
from service.store import DEFAULT_STORE, Store, open_context
from storage.backend import Backend

__all__ = [
    "Backend",
    "Context",
    "DEFAULT_STORE",
    "GovernanceWorker",
    "PROTOCOL_TEXT",
    "Store",
    "apply_pass",
    "open_context",
    "read_audit",
    "record_audit",
    "run_admission",
    "run_pass",
    "run_quarantine",
    "run_quarantine_scan",
    "run_review",
]
