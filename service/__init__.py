"""The application service: the one :class:`Context` API every port calls.

The CLI, the embedded API (``import morphz``), the Ray context actor and the servers
all reach memory through this package: observe, claim, commit, reads, recall, search,
governance runs, fork, import/export of frames, compile and traces. It depends on
:mod:`protocol` (the rules) and :mod:`storage` (persistence), never on a port.
"""

from service.context import Backend, Context
from service.store import DEFAULT_STORE, Store, open_context

__all__ = ["DEFAULT_STORE", "Backend", "Context", "Store", "open_context"]
