"""Read-modify-write of one frame with one round trip per attempt: :class:`Updater`.

:meth:`ContextHandle.update <actors.client.handle.ContextHandle.update>` reads the
frame once (``read_for_update``: the version and the body at that version, one
snapshot), builds a ``revise`` (or a ``derive`` when the frame does not exist,
or field edits when both bodies are keyed: see :meth:`Updater.tx`) from the
caller's function, and submits it. A ``conflict`` rejection carries
the frame as it stands now and the version to base on (the receipt's
``current`` and ``version``), so the retry is rebuilt from the receipt with no
read; the retry waits a jittered, exponentially growing delay first, so that
writers rejected together do not collide again at once. Other rejections end
the update (the receipt says why); ``too_old`` or a receipt without the frame
reads again.

The class is the pure part (no I/O, no clock): it turns reads and receipts into
the next transaction; the handle's blocking and ``async`` loops run it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from protocol.errors import MorphzError, RequestError
from protocol.fields import edits_between
from protocol.forms import Form, from_plain, to_plain
from protocol.receipts import Receipt
from protocol.sexpr import print_form, read_forms
from protocol.tx import FIELD_EDIT_CLASSES, ContextTx, Derive, Revise

UpdateFn = Callable[[dict[str, Any] | None], Sequence[Form]]
"""Given the frame's state (``{"revision", "version", "lifecycle", "body", "body_forms"}``,
or None when it does not exist), the frame's new body: a sequence of forms."""

MAX_UPDATE_ATTEMPTS = 1000
"""Most attempts one update may be given."""


@dataclass(slots=True)
class UpdateResult:
    """How one update ended: the last receipt, the attempts it took, the rejections on the
    way, how many reads it made, the frame's state after a commit (``frame``: pass it
    as ``known`` to the next update of the same frame to skip its read), and every
    attempt's transaction with its receipt (``submitted``, for history checkers)."""

    receipt: Receipt
    attempts: int
    rejections: int
    reads: int
    frame: dict[str, Any] | None = None
    submitted: tuple[tuple[ContextTx, Receipt], ...] = ()

    @property
    def committed(self) -> bool:
        """True if the update committed."""
        return self.receipt.committed


@dataclass(slots=True)
class Updater:
    """The transactions of one update of *frame_id* by *fn*, attempt after attempt."""

    frame_id: str
    fn: UpdateFn
    reason: str
    max_attempts: int
    attempts: int = 0
    rejections: int = 0
    reads: int = 0
    base: int = 0
    state: dict[str, Any] | None = None
    body: tuple[Form, ...] = field(default_factory=tuple)
    submitted: list[tuple[ContextTx, Receipt]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise RequestError("an update needs a function of the frame", code="bad_argument")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise RequestError("max_attempts must be an integer", code="bad_argument")
        if not 1 <= self.max_attempts <= MAX_UPDATE_ATTEMPTS:
            raise RequestError(
                f"max_attempts must be between 1 and {MAX_UPDATE_ATTEMPTS}, "
                f"not {self.max_attempts}",
                code="bad_argument",
            )
        if not isinstance(self.reason, str):
            raise RequestError("a reason is text", code="bad_argument")

    def known(self, known: dict[str, Any]) -> None:
        """Base the first attempt on a state the caller already holds (``UpdateResult.frame``)."""
        if not isinstance(known, dict) or not isinstance(known.get("version"), int):
            raise RequestError(
                "known must be the frame state of an earlier update", code="bad_argument"
            )
        self.base, self.state = known["version"], known

    def read(self, reply: Any) -> None:
        """Base the next attempt on a ``read_for_update`` reply."""
        self.reads += 1
        self.base = reply["version"]
        self.state = reply["frames"].get(self.frame_id)

    def tx(self) -> ContextTx:
        """The next attempt's transaction, from the state it is based on.

        When the frame and the new body are both keyed (docs/language.md, "Fields")
        and the kept fields keep their order, the attempt is the field edits that
        make the change (:func:`~protocol.fields.edits_between`): an ``append``
        when a field grew at the end, a ``set`` when it changed otherwise, and so
        on; so writers changing different fields, or appending to one, do not
        reject each other. Otherwise it is a ``revise`` of the whole body.
        """
        self.attempts += 1
        try:
            body = tuple(self.fn(self.state))
            ops: tuple[Any, ...]
            if self.state is None:
                ops = (Derive(id=self.frame_id, body=body),)
            else:
                ops = self._edits(body) or (Revise(id=self.frame_id, body=body),)
            tx = ContextTx(base_version=self.base, reason=self.reason, ops=ops)
        except ValidationError as e:
            raise RequestError(f"the update function gave a bad body: {e}") from e
        self.body = body
        return tx

    def _edits(self, body: tuple[Form, ...]) -> tuple[Any, ...]:
        """The field edits from the state's body to *body*; () when a revise is needed."""
        assert self.state is not None
        forms = self.state.get("body_forms")
        if not isinstance(forms, list):
            return ()
        try:
            old = tuple(from_plain(f, 1) for f in forms)
        except MorphzError:
            return ()
        edits = edits_between(old, body)
        if not edits:
            return ()
        return tuple(
            FIELD_EDIT_CLASSES[op].model_validate(
                {"id": self.frame_id, "field": name, "values": values}
            )
            for op, name, values in edits
        )

    def outcome(self, tx: ContextTx, receipt: Receipt) -> bool | None:
        """After *tx*'s receipt: True (done, committed), False (done, rejected for good or out
        of attempts), None (retry; call :meth:`rebased` first, or read again if it says so)."""
        self.submitted.append((tx, receipt))
        if receipt.committed:
            # Edits merged into a newer revision leave a frame this update has not seen:
            # the state stays based on the version read, so a later set still conflicts
            # with whatever changed its field since.
            merged = any(e.outcome == "merged" for e in receipt.edits)
            self.state = {
                "revision": 1 if self.state is None else int(self.state["revision"]) + 1,
                "version": tx.base_version if merged else receipt.version,
                "lifecycle": "active" if self.state is None else self.state["lifecycle"],
                "body": " ".join(print_form(f) for f in self.body),
                "body_forms": [to_plain(f) for f in self.body],
            }
            return True
        self.rejections += 1
        codes = {e.code for e in receipt.errors}
        if not codes <= {"conflict", "too_old", "frame_exists"}:
            return False
        if self.attempts >= self.max_attempts:
            return False
        return None

    def rebased(self, receipt: Receipt) -> bool:
        """Base the retry on a rejected receipt's ``current`` frame; False: read again."""
        for c in receipt.current:
            if c.id == self.frame_id:
                if c.body is None:
                    self.state = None
                else:
                    forms = read_forms(c.body)
                    self.state = {
                        "revision": c.revision,
                        "version": c.version,
                        "lifecycle": c.lifecycle,
                        "body": c.body,
                        "body_forms": [to_plain(f) for f in forms],
                    }
                self.base = receipt.version
                return True
        return False

    def result(self, receipt: Receipt) -> UpdateResult:
        """The result to hand back after the last receipt."""
        return UpdateResult(
            receipt=receipt,
            attempts=self.attempts,
            rejections=self.rejections,
            reads=self.reads,
            frame=self.state if receipt.committed else None,
            submitted=tuple(self.submitted),
        )
