"""What a submission costs the context actor before the inbox: bytes held, and decoding.

:class:`Intake` keeps three byte budgets over the transaction payloads the actor
holds at once (from the moment a call arrives until every one of its
transactions is decided):

- **per call**: the payloads of one ``submit`` / ``submit_many`` call
  (:data:`MAX_CALL_BYTES`);
- **per caller**: the payloads in flight of one caller, named by the
  capability it sends (all callers of a context that enforces nothing share
  one name), so one writer's flood cannot take the others' share
  (:data:`MAX_CALLER_BYTES`);
- **per inbox**: everything in flight (:data:`MAX_INBOX_BYTES`).

A call over any of them is refused whole with
:class:`~protocol.errors.Overloaded` (``code == "overloaded"``) before
anything of it is decoded; nothing is decided. A payload larger than
:data:`DECODE_INLINE_BYTES` is decoded on the intake's own thread, not on the
actor's event loop, so a big payload does not stall the other calls (Python
still holds the GIL while it decodes: the loop is slowed, not stopped).

Ray has already materialized a call's arguments when the actor sees them: the
budgets bound what the actor decodes and keeps waiting, not what Ray transfers.
"""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from actors.client.names import MAX_CALL_BYTES
from protocol.errors import Overloaded
from protocol.txwire import SubmittedTx, submitted_from_msgpack

__all__ = [
    "DECODE_INLINE_BYTES",
    "MAX_CALLER_BYTES",
    "MAX_CALL_BYTES",
    "MAX_INBOX_BYTES",
    "Intake",
]

MAX_CALLER_BYTES = 32 << 20
"""The most payload bytes one caller may have in flight at once."""
MAX_INBOX_BYTES = 128 << 20
"""The most payload bytes the actor holds at once, every caller together."""
DECODE_INLINE_BYTES = 64 << 10
"""Payloads up to this size are decoded on the event loop (cheaper than a thread hop)."""


class Intake:
    """The byte budgets and the decoding thread of one context actor (module docstring)."""

    def __init__(
        self,
        *,
        call_bytes: int = MAX_CALL_BYTES,
        caller_bytes: int = MAX_CALLER_BYTES,
        inbox_bytes: int = MAX_INBOX_BYTES,
        inline_bytes: int = DECODE_INLINE_BYTES,
    ) -> None:
        self.call_bytes = call_bytes
        self.caller_bytes = caller_bytes
        self.inbox_bytes = inbox_bytes
        self.inline_bytes = inline_bytes
        self.held = 0
        """Payload bytes in flight now."""
        self.offloaded = 0
        """Payloads decoded off the event loop so far."""
        self._by_caller: dict[bytes, int] = {}
        self._executor: ThreadPoolExecutor | None = None

    @staticmethod
    def caller(capability: Any) -> bytes:
        """The name a caller's budget is kept under: a digest of the token it sends."""
        if not isinstance(capability, bytes):
            return b""
        return hashlib.blake2b(capability, digest_size=16).digest()

    def reserve(self, caller: bytes, size: int) -> None:
        """Take *size* bytes for one call of *caller*; Overloaded (nothing taken) when a
        budget would be exceeded. Pair with :meth:`release`."""
        if size > self.call_bytes:
            raise Overloaded(
                f"one call carries {size} bytes of transactions; at most {self.call_bytes}:"
                " send fewer at once"
            )
        mine = self._by_caller.get(caller, 0)
        if mine + size > self.caller_bytes:
            raise Overloaded(
                f"this caller has {mine} bytes of transactions in flight; at most"
                f" {self.caller_bytes}: wait for the answers, then retry"
            )
        if self.held + size > self.inbox_bytes:
            raise Overloaded(
                f"the context holds {self.held} bytes of transactions; at most"
                f" {self.inbox_bytes}: retry later"
            )
        self._by_caller[caller] = mine + size
        self.held += size

    def release(self, caller: bytes, size: int) -> None:
        """Give back what :meth:`reserve` took."""
        left = self._by_caller.get(caller, 0) - size
        if left > 0:
            self._by_caller[caller] = left
        else:
            self._by_caller.pop(caller, None)
        self.held = max(0, self.held - size)

    async def decode(self, payload: bytes) -> SubmittedTx:
        """*payload* decoded (``protocol.txwire.submitted_from_msgpack``): on the event loop
        when small, on the intake's thread when larger than ``inline_bytes``."""
        if not isinstance(payload, bytes) or len(payload) <= self.inline_bytes:
            return submitted_from_msgpack(payload)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="morphz-decode")
        self.offloaded += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, submitted_from_msgpack, payload)

    def shutdown(self) -> None:
        """Stop the decoding thread (after the decodes in progress)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
