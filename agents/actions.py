"""External tools (R10, R43): the runner that calls them, and the ledger of irreversible actions.

An agent's action is either a reply or one external tool call, run on its own
path beside the turn's transactions (R10). :class:`ToolRunner` runs such a
call through a handler, or answers it from a fixed table of reports (the
scripted tools of the demo and the tests, :data:`DEMO_TOOL_RESULTS`).

An irreversible call carries an idempotency key. :meth:`ToolRunner.run_recorded`
records the key in the context's event history before the call runs (an
``intent:`` event in the ``actions`` session, with an id derived from the key),
and its result after (a ``result:`` event): a restarted loop reuses a recorded
result instead of running the action again, and an intent without a result is
reported for reconciliation, never run twice. The memory tools are not here:
see :mod:`agents.tools`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import NotFound
from protocol.state import LEDGER
from protocol.turns import ToolCall

DEMO_TOOL_RESULTS: Mapping[str, str] = {
    "run_tests": "regression suite: 412 passed, 0 failed",
    "package": "package: dist/app-1.0.0.tgz",
    "read_config": "production config: region=cn-shanghai",
    "deploy": "deployment: rolled out to the configured region",
}
"""The scripted tools of the demo and the tests: name → the text they report."""


INTENT = "intent:"
RESULT = "result:"
RECONCILE = "reconcile:"
"""Prefixes of the ``ledger`` events that record an irreversible action (R43)."""
LEDGER_SESSION = "actions"
"""The session those events go to: out of the model's own session, so that an intent
is never read as the action's result."""


def key_event_id(stage: str, key: str) -> str:
    """The stable event id of *stage* (intent, result, reconcile) of idempotency key *key*.

    Derived from the key, so recording the same stage twice is one event, and
    a restarted loop finds the records of a key without scanning the history.
    """
    digest = hashlib.sha256(f"morphz-action\0{stage}\0{key}".encode()).hexdigest()
    return "ev:" + digest[:20]


class ToolFailed(Exception):
    """Raised by a tool handler whose action failed; the model reads the message."""


@dataclass(frozen=True)
class ToolOutcome:
    """What running one tool call came to.

    ``status``: ``ran`` (ran now), ``reused`` (a result recorded under its key
    was found: not run again), ``unknown`` (an intent without a result: it may
    have run before a crash; not run again, it needs reconciliation) or
    ``reconciled`` (the tool's ``status(key)`` answered the outcome).
    """

    text: str
    status: str
    key: str | None = None
    failed: bool = False
    """True when the tool ran and reported a failure (it raised, or there is no such tool)."""

    @property
    def ran(self) -> bool:
        """True when the tool ran now."""
        return self.status == "ran"


class ToolRunner:
    """Runs external tools; the scripted default answers from :data:`DEMO_TOOL_RESULTS`.

    An irreversible call's idempotency key is recorded before it runs; a second
    call with the same key returns the first result without running again.
    Through :meth:`run_recorded` the key lives in the context's event history
    (R43), so a restarted loop does not repeat the action either. *statuses*
    maps a tool name to ``status(key) -> str | None``: the outcome of an
    earlier run under *key*, if the tool can tell (None: it cannot).
    """

    def __init__(
        self,
        results: Mapping[str, str] | None = None,
        handlers: Mapping[str, Callable[[ToolCall], str]] | None = None,
        statuses: Mapping[str, Callable[[str], str | None]] | None = None,
        ledger_session: str = LEDGER_SESSION,
    ) -> None:
        self.results = dict(DEMO_TOOL_RESULTS if results is None else results)
        self.handlers = dict(handlers or {})
        self.statuses = dict(statuses or {})
        self.ledger_session = ledger_session
        self.ran: list[str] = []
        self.unreconciled: list[str] = []
        """Idempotency keys whose outcome is unknown (intent recorded, no result)."""
        self._keys: dict[str, str] = {}

    def specs(self) -> tuple[dict[str, Any], ...]:
        """The external tools in OpenAI's function-tool form."""
        names = sorted({*self.results, *self.handlers})
        return tuple(
            {
                "type": "function",
                "function": {"name": n, "parameters": {"type": "object", "properties": {}}},
            }
            for n in names
        )

    def run(self, call: ToolCall) -> tuple[str, bool]:
        """The tool's report text, and whether it ran now (False: a repeated idempotency key)."""
        outcome = self.call(call)
        return outcome.text, outcome.ran

    def call(self, call: ToolCall) -> ToolOutcome:
        """Run *call* unless its idempotency key already ran in this runner.

        A handler that raises :class:`ToolFailed` fails the call: the report
        says so and the outcome's ``failed`` is set (a use that failed, for
        R43's quarantine). Any other exception propagates: the thread died.
        """
        key = call.idempotency_key
        if key is not None and key in self._keys:
            return ToolOutcome(self._keys[key], "reused", key)
        if key is not None:
            self._keys[key] = f"{call.name}: started (idempotency key {key})"
        handler = self.handlers.get(call.name)
        failed = False
        if handler is not None:
            try:
                text = handler(call)
            except ToolFailed as e:
                text, failed = f"{call.name}: failed: {e}", True
        elif call.name in self.results:
            text = self.results[call.name]
        else:
            text, failed = f"{call.name}: no such tool", True
        if key is not None:
            self._keys[key] = text
        self.ran.append(call.name)
        return ToolOutcome(text, "ran", key, failed)

    def run_recorded(self, call: ToolCall, port: Any, session: str) -> ToolOutcome:
        """Run an irreversible *call* with its key recorded in the context first (R43).

        1. a ``result:`` event under the key exists: reuse its text, do not run;
        2. record the ``intent:`` event (stable id from the key). If it was
           already there, an earlier run died between intent and result: do not
           run; ask ``statuses[tool](key)`` when there is one, else record a
           ``reconcile:`` event and answer ``unknown``;
        3. run, then record the ``result:`` event and the ``tool_result`` in
           one durable write.
        Calls without ``irreversible`` and a key, or ports without ``event``,
        fall back to :meth:`run`.
        """
        key = call.idempotency_key
        if not call.irreversible or key is None or not hasattr(port, "event"):
            return self.call(call)
        found = _recorded_text(port, key_event_id("result", key))
        if found is not None:
            self._keys[key] = found
            return ToolOutcome(found, "reused", key)
        intent = port.observe(
            LEDGER,
            f"{INTENT} {call.name} key={key}",
            session=self.ledger_session,
            event_id=key_event_id("intent", key),
        )
        if intent.get("duplicate"):
            status = self.statuses.get(call.name)
            known = status(key) if status is not None else None
            if known is not None:
                port.observe_many(
                    [
                        (
                            LEDGER,
                            f"{RESULT} {call.name} key={key}\n{known}",
                            self.ledger_session,
                            key_event_id("result", key),
                        ),
                        ("tool_result", known, session, None),
                    ]
                )
                return ToolOutcome(known, "reconciled", key)
            if key not in self.unreconciled:
                self.unreconciled.append(key)
            text = (
                f"{call.name}: outcome unknown (idempotency key {key}): an earlier run"
                " recorded its intent but no result; not run again, needs reconciliation"
            )
            port.observe(
                LEDGER,
                f"{RECONCILE} {call.name} key={key} needs reconciliation",
                session=self.ledger_session,
                event_id=key_event_id("reconcile", key),
            )
            return ToolOutcome(text, "unknown", key)
        outcome = self.call(call)
        text = outcome.text
        port.observe_many(
            [
                (
                    LEDGER,
                    f"{RESULT} {call.name} key={key}\n{text}",
                    self.ledger_session,
                    key_event_id("result", key),
                ),
                ("tool_result", text, session, None),
            ]
        )
        return ToolOutcome(text, "ran", key, outcome.failed)


def _recorded_text(port: Any, event_id: str) -> str | None:
    """The report recorded in a ``result:`` event (after its first line), or None."""
    try:
        port.event(event_id)
    except NotFound:
        return None
    doc = port.read_event(event_id)
    text = str(doc["text"])
    return text.split("\n", 1)[1] if "\n" in text else text


__all__ = [
    "DEMO_TOOL_RESULTS",
    "INTENT",
    "LEDGER_SESSION",
    "RECONCILE",
    "RESULT",
    "ToolFailed",
    "ToolOutcome",
    "ToolRunner",
    "key_event_id",
]
