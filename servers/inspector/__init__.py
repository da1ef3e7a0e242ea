"""The web inspector: contexts, their graph as of any version, a frame's history and
diffs, transactions as they arrive, usage traces, search and governance, as pages
rendered on the server, each with its JSON twin (docs/inspector.md).

:func:`create_inspector` builds the app over a :class:`Source`: a
:class:`StoreSource` (``morphz inspect``: an embedded store, read-only) or a
:class:`HandleSource` (``morphz serve``: contexts behind their actors, every read
checked by the actor's capability guard).
"""

from servers.inspector.app import COOKIE, CSP, create_inspector
from servers.inspector.source import READS, HandleSource, Source, StoreSource

__all__ = ["COOKIE", "CSP", "READS", "HandleSource", "Source", "StoreSource", "create_inspector"]
