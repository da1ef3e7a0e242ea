"""The context compiler: durable records in, one model input out (R31–R37).

:func:`compile_input` (or a long-lived :class:`Compiler`, which caches what it
rendered) reads one snapshot through a :class:`~protocol.view.ReadView` and
returns a :class:`~protocol.turns.CompiledInput`. It is pure: no I/O beyond
the view, no clock, no randomness; the same records (and the same
``previous``) always give byte-identical messages. It only selects and
renders records; it never summarizes (R34).

Layout, most stable first so prompt caches keep the longest prefix (R35)::

    system  the protocol text (given by the caller) and the model's limits
    user    ## observations — the active observations in sequence order,
            ``@eN kind [session] : text``; long tool results as a preview
            plus a reference (R36). Only grows at its end while nothing retires.
    user    ## frames, ## relations, ## sessions, ## runtime — the state,
            which changes more (the runtime section changes every call)

The protocol text is model-facing text, not a rule, so it is not here: the
service serves it (:data:`service.protocol_text.PROTOCOL_TEXT`) and passes it
to every compiler it builds (``Compiler(config, protocol_text=...)``).

The package, by concern:

* :mod:`~protocol.compiler.config` — :class:`CompilerConfig`, the layout's
  fixed strings, :func:`limits_text`;
* :mod:`~protocol.compiler.input` — :class:`Compiler`, :func:`compile_input`;
* :mod:`~protocol.compiler.mirror` — following one context from the log;
* :mod:`~protocol.compiler.render` — entries of observations and frames, cached;
* :mod:`~protocol.compiler.sections` — the sessions and runtime sections;
* :mod:`~protocol.compiler.capacity` — pressure, maintenance mode, batches (R31–R33);
* :mod:`~protocol.compiler.delta` — ContextDelta (R37);
* :mod:`~protocol.compiler.facts` — reading inputs back (:func:`input_facts`).

See ``docs/compiler.md``.
"""

from protocol.compiler.capacity import capacity_for
from protocol.compiler.config import (
    BATCH_HEADER,
    DELTA_HEADER,
    HIDDEN_KINDS,
    LONG_KINDS,
    MAX_DELTA_SPAN,
    MAX_MIRROR_GAP,
    MESSAGE_OVERHEAD,
    NONE,
    OBSERVATIONS_HEADER,
    RUNTIME_CHANGES_HEADER,
    RUNTIME_HEADER,
    CompilerConfig,
    limits_text,
)
from protocol.compiler.facts import InputFacts, input_facts
from protocol.compiler.input import Compiler, compile_input

__all__ = [
    "BATCH_HEADER",
    "Compiler",
    "CompilerConfig",
    "DELTA_HEADER",
    "HIDDEN_KINDS",
    "InputFacts",
    "LONG_KINDS",
    "MAX_DELTA_SPAN",
    "MAX_MIRROR_GAP",
    "MESSAGE_OVERHEAD",
    "NONE",
    "OBSERVATIONS_HEADER",
    "RUNTIME_CHANGES_HEADER",
    "RUNTIME_HEADER",
    "capacity_for",
    "compile_input",
    "input_facts",
    "limits_text",
]
