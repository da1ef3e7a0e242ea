"""One cognitive context over any store that offers ``read(fn)`` and ``transact(fn)``.

:class:`Context` is the embedded API of one agent memory (R1): record
observations, claim input batches, commit transactions (one at a time or
group-committed), read frames, events, the state and a frame's write history,
recall and search, compile model inputs, keep usage traces, run governance,
fork, and export or import a frame. Every port (the CLI, the Ray context actor,
an agent loop's embedded port) calls these methods. Its only state beyond the
store handle is caches (compilers per session, the search index): every answer
comes from durable records.

Every operation declared in :mod:`service.operations` is a method of :class:`Context`
through its base :class:`~service.operations.Operations`; the work is split over
:mod:`service.reads` (read shapes), :mod:`service.transactions`,
:mod:`service.observations`, :mod:`service.compile`, :mod:`service.search`,
:mod:`service.sharing`, :mod:`service.traces` and, for governance,
:mod:`service.context_governance` (a base class of :class:`Context`); this module
holds what is no operation: opening, counters, commits under their embedded
names, the search index's upkeep, settings, forking and closing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

import service.reads as reads
import service.traces as traces
import service.transactions as transactions
from protocol.engine import observe
from protocol.errors import OutOfRange
from protocol.receipts import Receipt
from protocol.replies import Counter, ObserveReply
from protocol.state import Event, Frame, Meta
from protocol.tx import ContextTx
from protocol.txwire import SubmittedTx
from protocol.view import Changeset, WriteView
from service.compile import CompilerCache
from service.context_governance import GovernanceAPI
from service.observations import new_event_id, observed
from service.operations import Operations
from service.registry import Caller, Operation
from service.search import Searcher
from storage.backend import Backend

if TYPE_CHECKING:
    from protocol.governance import AdmissionPolicy

T = TypeVar("T")

MAX_WINDOW = 1_000_000


class Acting(Operations):
    """The operations of a :class:`Context` as one :class:`~service.registry.Caller`
    calls them (see :meth:`Context.acting`)."""

    def __init__(self, ctx: Context, caller: Caller) -> None:
        self.ctx = ctx
        self.caller = caller

    def invoke(self, op: Operation[Any, T], args: BaseModel) -> T:
        """Run a registered operation on the context as this caller."""
        return op.run(self.ctx, args, self.caller)

    async def invoke_async(self, op: Operation[Any, T], args: BaseModel) -> T:
        """:meth:`invoke` inside a coroutine (in the loop's thread)."""
        return self.invoke(op, args)


class Context(Operations, GovernanceAPI):
    """One agent memory. Thread-compatible, not thread-safe: one writer at a time."""

    def __init__(
        self,
        backend: Backend,
        *,
        window: int | None = None,
        history_keep: int | None = None,
        name: str = "default",
        tenant: str | None = None,
        project: str | None = None,
        embedder: Any = None,
    ):
        self.backend = backend
        self.name = name
        if window is not None and not 0 <= window <= MAX_WINDOW:
            raise OutOfRange(f"window must be between 0 and {MAX_WINDOW} ticks, not {window}")
        if history_keep is not None and not 1 <= history_keep <= 1 << 40:
            raise OutOfRange(f"history_keep must be at least 1, not {history_keep}")

        def init(w: WriteView) -> Meta:
            meta = w.meta()
            if meta.created == 0.0:
                meta = meta.copy()
                meta.created = time.time()
                if window is not None:
                    meta.window = window
                if history_keep is not None:
                    meta.history_keep = history_keep
                meta.tenant, meta.project = tenant, project
                w.apply(Changeset(meta=meta))
            return meta

        meta = backend.read(lambda v: v.meta())
        if meta.created == 0.0 and not getattr(backend, "readonly", False):
            meta = backend.transact(init)
        self._meta = meta
        self._compilers = CompilerCache()
        self._searcher: Searcher | None = None
        self._embedder: Any = embedder  # a config or an embedder: search is hybrid

    def invoke(self, op: Operation[Any, T], args: BaseModel) -> T:
        """Run a registered operation (:mod:`service.operations`) with its checked *args*:
        the embedded API of every call declared there, audited as ``embedded``."""
        return op.run(self, args, Caller())

    async def invoke_async(self, op: Operation[Any, T], args: BaseModel) -> T:
        """:meth:`invoke` inside a coroutine: ``await ctx.frame.aio(id)`` runs the call
        in the loop's thread (an embedded context is not thread-safe)."""
        return self.invoke(op, args)

    def acting(
        self,
        *,
        holder: str | None = "embedded",
        policy: AdmissionPolicy | None = None,
        key: bytes | None = None,
        tenant: str | None = None,
        project: str | None = None,
    ) -> Acting:
        """This context's operations called by *holder* (the audit entries name it instead
        of ``embedded``) under admission *policy* (``admit``, ``pending``), sealing and
        opening shared frames with *key* (``export_frame``, ``import_frame``) on behalf of
        *tenant* and *project* (default: the context's own): what a remote port sets from
        the capability, its own policy, grant key and scope.
        ``ctx.acting(holder="ops").admit()``, ``ctx.acting(key=k).export_frame("f")``."""
        sealing = None if key is None else (lambda: key)
        caller = Caller(holder=holder, policy=policy, key=sealing, tenant=tenant, project=project)
        return Acting(self, caller)

    # -- counters -----------------------------------------------------------

    # ``version`` and ``tick`` are registered operations (every port answers ``version()``);
    # here they stay properties answering a callable Counter, so the bare form of old code
    # still reads the number (deprecated, it warns once).

    @property
    def version(self) -> Counter:  # type: ignore[override]
        """The current version: the number of committed transactions.

        Call it, ``ctx.version()``, as on a Ray handle; the bare ``ctx.version``
        still reads the number (a deprecated alias, see docs/api.md).
        """
        return Counter(self.backend.read(lambda v: v.meta()).version)

    @property
    def tick(self) -> Counter:  # type: ignore[override]
        """The current cognitive tick: ``ctx.tick()`` (the bare form is a deprecated alias)."""
        return Counter(self.backend.read(lambda v: v.meta()).tick)

    # -- writes -------------------------------------------------------------

    def observe_batch(self, items: Sequence[Any]) -> list[ObserveReply]:
        """:meth:`observe_many` under its former name (items with event ids)."""
        return self.observe_many(items)

    def observe_retrieval(
        self, text: str, frames: Sequence[str], *, session: str = "main"
    ) -> ObserveReply:
        """Record retrieved memory (e.g. search hits) as a ``recall_result`` observation.

        ``extra["recalled"]`` lists *frames*, the frames it names, for the usage
        traces of the calls that see it (R42).
        """
        e = self._observe_one("recall_result", text, session, {"recalled": list(frames)})
        return observed(e, False)

    def _observe_one(self, kind: str, text: str, session: str, extra: dict[str, Any]) -> Event:
        now = time.time()
        eid = new_event_id()

        def run(w: WriteView) -> Event:
            e, cs = observe(
                w, kind=kind, text=text, session=session, now=now, event_id=eid, extra=extra
            )
            w.apply(cs)
            return e

        return self.backend.transact(run)

    def commit(self, tx: ContextTx | str, *, client_id: str | None = None) -> Receipt:
        """Validate and commit one transaction durably; return its receipt (``submit``
        with the client id as a keyword).

        *tx* is a model or S-expression text (a :class:`~protocol.errors.ParseError`
        is raised for bad text: that is not a transaction, so there is no receipt).
        """
        return transactions.commit(self, tx, client_id)

    def commit_many(
        self,
        txs: Sequence[
            ContextTx | str | SubmittedTx | tuple[ContextTx | str | SubmittedTx, str | None]
        ],
    ) -> list[Receipt]:
        """Group commit: evaluate each transaction in order and write all in one durable write.

        Each is decided against the state the previous ones left; a rejected one
        writes nothing and does not affect the others. Items may be ``(tx, client_id)``
        pairs and a port's :class:`~protocol.txwire.SubmittedTx` (``submit_many`` takes
        the transactions themselves).
        """
        return transactions.commit_many(self, txs)

    def frame_record(self, frame_id: str) -> Frame:
        """The stored :class:`Frame`; raises NotFound for an unknown id."""
        f = self.backend.read(lambda v: v.frame(frame_id))
        if f is None:
            raise self.backend.read(lambda v: reads.no_frame(v, frame_id))
        return f

    @property
    def searcher(self) -> Searcher:
        """This context's search index and its upkeep, made on first use."""
        if self._searcher is None:
            self._searcher = Searcher(self.backend, embedder=self._embedder)
        return self._searcher

    def settings(self) -> dict[str, Any] | None:
        """How this context is served, as the port serving it recorded it
        (:attr:`protocol.state.Meta.settings`); None if none was recorded."""
        settings = self.backend.read(lambda v: v.meta()).settings
        return None if settings is None else dict(settings)

    def record_settings(self, settings: dict[str, Any]) -> bool:
        """Record *settings* (plain JSON values, no secret) in the context's meta: one
        write, made only if they differ from the recorded ones; True if it wrote.

        They travel with the store: a copy, a restore or a follower holds them too.
        """
        new_settings = dict(settings)

        def run(view: WriteView) -> bool:
            meta = view.meta()
            if meta.settings == new_settings:
                return False
            changed = meta.copy()
            changed.settings = new_settings
            view.apply(Changeset(meta=changed))
            return True

        return self.backend.transact(run)

    def use_embedder(self, embedder: Any) -> None:
        """Make search hybrid with *embedder* (an ``EmbedderConfig``, built at the first
        search and closed with the context, or an ``Embedder`` the caller closes); None
        makes it lexical again. See docs/search.md."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
        self._embedder = embedder

    def use_index(self, index: Any) -> None:
        """Search *index* (a :class:`~storage.search.LexicalIndex` the caller opened and
        closes) instead of the one beside the store."""
        if self._searcher is not None:
            self._searcher.close()
        self._searcher = Searcher(self.backend, index, embedder=self._embedder)

    # -- usage traces -----------------------------------------------------------

    def influence(self, *, version: int | None = None, call: int | None = None) -> dict[str, Any]:
        """Which memories influenced a decision (R42): the one committed at *version*,
        or everything traced call *call* decided and did.

        From the usage trace (:func:`protocol.usage.influence`), with
        ``"traced": True``. A version no traced call committed (a transaction
        from the CLI or an API user, a runtime or governance record) answers
        from the log alone: what it cited, with ``"traced": False``.
        """
        return traces.influence(self, version=version, call=call)

    def fork(self, target: Backend, *, at_version: int | None = None) -> Context:
        """A new context in *target* (an empty store) holding this one as of *at_version*.

        See :func:`service.fork.fork_into`; the fork records where it came from.
        """
        from service.fork import fork_into

        fork_into(self.backend, target, at_version=at_version, origin=self.name)
        return Context(target, name=self.name + "-fork")

    def close(self) -> None:
        """Close the search index (if one was opened), then the underlying store."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
        self.backend.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
