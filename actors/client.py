"""The public handle of a context actor: :func:`connect`, :func:`lookup`, :class:`ContextHandle`.

Like ``ray.util.queue``: a small wrapper creates (or finds) the named actor,
validates arguments before any remote call, offers blocking and ``async``
forms, and translates Ray's errors into the library's own
(:class:`~protocol.errors.StoreError` with code ``actor_unavailable`` when the
actor cannot be reached after the retries, ``actor_error`` when it failed).

Idempotency (R25): :meth:`ContextHandle.submit` gives every transaction a
client id (a fresh ``c-<uuid4>`` unless one is given) and sends the same id on
every retry, so a retry after a lost reply or an actor restart returns the
original receipt (``duplicate=True``) instead of committing twice. Ray itself
may re-run a call after a restart (``max_task_retries=-1``); the client id
makes that safe too. Observations get a caller-chosen event id for the same
reason. ``claim`` is at-least-once: a repeated claim claims whatever waits at
that moment (often nothing, which does not advance the tick).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from actors.context_actor import MAX_EXPORT_PAGE, ContextActor
from actors.placement import actor_name, check_node, current_node_id, ensure_ray, pinned
from actors.replies import open_reply, raise_error
from protocol.errors import MorphzError, NotFound, RequestError, StoreError, WireError
from protocol.governance import (
    MAX_AUDIT_PAGE,
    AdmissionPolicy,
    check_every,
    check_page,
    check_review,
    check_scan,
)
from protocol.ids import MAX_CLIENT_ID
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.wire import tx_to_msgpack, unpack
from service.context import MAX_WINDOW, new_event_id
from storage import check_context_name

DEFAULT_NAMESPACE = "morphz"
"""The Ray namespace context actors live in unless told otherwise."""
MAX_CONCURRENCY = 1000
"""Calls one context actor's event loop accepts at once."""
UNGUARDED = frozenset({"handshake", "pid", "node_id"})
"""Actor methods that take no capability (no content: what ``connect`` checks)."""


def new_client_id() -> str:
    """A fresh client id: ``c-`` and a uuid4 in hex."""
    return "c-" + uuid.uuid4().hex


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for calls that could not reach the actor.

    Delays are ``initial * multiplier**n`` capped at ``max_delay``, each scaled
    by a random factor in [0.5, 1]; at most ``attempts`` retries. The default
    waits 1.8 to 3.6 s in all before giving up.
    """

    attempts: int = 7
    initial: float = 0.05
    multiplier: float = 2.0
    max_delay: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 0 or self.initial < 0 or self.multiplier < 1 or self.max_delay < 0:
            raise RequestError("a retry policy needs attempts, delays >= 0 and multiplier >= 1")

    def delay(self, retry: int, rng: random.Random | None = None) -> float | None:
        """Seconds to wait before retry number *retry* (0-based), or None: give up."""
        if retry >= self.attempts:
            return None
        base = min(self.max_delay, self.initial * self.multiplier**retry)
        return base * (0.5 + 0.5 * (rng or random).random())


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        _ACTOR_CLASS = ray.remote(ContextActor)
    return _ACTOR_CLASS


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise RequestError(
            f"{what} must be a string, not {type(value).__name__}", code="bad_argument"
        )
    return value


def _check_int(value: object, what: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise RequestError(
            f"{what} must be an integer >= {low}, not {value!r}", code="bad_argument"
        )
    return value


def _task_failure(name: str, e: BaseException) -> MorphzError:
    cause = getattr(e, "cause", None)
    if isinstance(cause, MorphzError):
        return cause
    return StoreError(f"context actor {name!r} failed: {cause or e}", code="actor_error")


def _receipt(raw: Any) -> Receipt:
    doc = unpack(raw)
    if isinstance(doc, dict) and "error" in doc and "status" not in doc:
        raise_error(doc["error"])
    try:
        return Receipt.from_dict(doc)
    except Exception as e:  # pydantic's ValidationError, or a non-dict
        raise WireError(f"malformed receipt from the context actor: {e}") from e


class ContextHandle:
    """A picklable handle of one context actor; pass it to other actors freely.

    Every method is blocking; the ``*_async`` forms are for event loops (agent
    threads). Errors are the library's own: a refused request raises the same
    class it would raise embedded (``NotFound`` for an unknown frame …), a
    rejected transaction is a receipt, and an unreachable actor raises
    :class:`StoreError` (code ``actor_unavailable``) after the retry policy.
    """

    def __init__(
        self,
        actor: Any,
        name: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        capability: bytes | None = None,
    ) -> None:
        self._actor = actor
        self.name = name
        self.namespace = namespace
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        if capability is not None and not isinstance(capability, bytes):
            raise RequestError("a capability is token bytes", code="bad_argument")
        self.capability = capability

    def with_capability(self, capability: bytes | None) -> ContextHandle:
        """The same actor, calls carrying *capability* (token bytes, see protocol.capabilities)."""
        return ContextHandle(
            self._actor,
            self.name,
            namespace=self.namespace,
            retry=self.retry,
            timeout=self.timeout,
            capability=capability,
        )

    def __repr__(self) -> str:
        return f"ContextHandle({self.name!r}, namespace={self.namespace!r})"

    @property
    def actor(self) -> Any:
        """The underlying Ray actor handle (its methods answer msgpack; see the docs)."""
        return self._actor

    # -- transport ------------------------------------------------------------

    def _refresh(self, e: BaseException) -> None:
        """After the actor died for good, pick up a context actor recreated under its name."""
        import ray
        from ray.exceptions import ActorDiedError

        if not isinstance(e, ActorDiedError):
            return
        try:
            self._actor = ray.get_actor(actor_name(self.name), namespace=self.namespace)
        except ValueError:
            pass

    def _unavailable(self, e: BaseException) -> StoreError:
        return StoreError(
            f"context actor {self.name!r} unavailable after {self.retry.attempts} retries: {e}",
            code="actor_unavailable",
        )

    def _kwargs(self, method: str) -> dict[str, Any]:
        if self.capability is None or method in UNGUARDED:
            return {}
        return {"capability": self.capability}

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

        wait = self.timeout if timeout is None else timeout
        kwargs = self._kwargs(method)
        retry = 0
        while True:
            try:
                ref = getattr(self._actor, method).remote(*args, **kwargs)
                return ray.get(ref, timeout=wait)
            except RayTaskError as e:
                raise _task_failure(self.name, e) from e
            except (RayActorError, GetTimeoutError) as e:
                delay = self.retry.delay(retry)
                retry += 1
                if delay is None:
                    raise self._unavailable(e) from e
                time.sleep(delay)
                self._refresh(e)
            except RayError as e:
                raise StoreError(f"context actor {self.name!r}: {e}", code="actor_error") from e

    async def _call_async(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        from ray.exceptions import RayActorError, RayError, RayTaskError

        wait = self.timeout if timeout is None else timeout
        kwargs = self._kwargs(method)
        retry = 0
        while True:
            try:
                ref = getattr(self._actor, method).remote(*args, **kwargs)
                return await asyncio.wait_for(ref, wait)
            except RayTaskError as e:
                raise _task_failure(self.name, e) from e
            except (RayActorError, TimeoutError) as e:  # GetTimeoutError is a TimeoutError
                delay = self.retry.delay(retry)
                retry += 1
                if delay is None:
                    raise self._unavailable(e) from e
                await asyncio.sleep(delay)
                self._refresh(e)
            except RayError as e:
                raise StoreError(f"context actor {self.name!r}: {e}", code="actor_error") from e

    # -- transactions ---------------------------------------------------------

    @staticmethod
    def prepare(tx: ContextTx | str, client_id: str | None = None) -> tuple[ContextTx, bytes]:
        """The transaction with its client id settled, and its wire payload.

        Text is parsed here (a :class:`~protocol.errors.ParseError` never
        reaches the actor). The client id is *client_id*, else the one inside
        *tx*, else a fresh one.
        """
        if isinstance(tx, str):
            from protocol.txlang import parse_tx

            tx = parse_tx(tx)
        if not isinstance(tx, ContextTx):
            raise RequestError(
                f"a transaction is a ContextTx or its text, not {type(tx).__name__}",
                code="bad_argument",
            )
        cid = client_id if client_id is not None else tx.client_id
        if cid is None:
            cid = new_client_id()
        if not isinstance(cid, str) or not 1 <= len(cid) <= MAX_CLIENT_ID:
            raise RequestError(
                f"a client id is 1 to {MAX_CLIENT_ID} characters", code="bad_client_id"
            )
        if cid != tx.client_id:
            tx = tx.model_copy(update={"client_id": cid})
        return tx, tx_to_msgpack(tx)

    def submit(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        """Submit one transaction and wait for its durable receipt (committed or rejected).

        Retries (lost replies, a restarting actor, *timeout* per attempt) reuse
        the client id, so the transaction is applied at most once.
        """
        _, payload = self.prepare(tx, client_id)
        return _receipt(self._call("submit", payload, timeout=timeout))

    async def submit_async(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        """:meth:`submit` for event loops."""
        _, payload = self.prepare(tx, client_id)
        return _receipt(await self._call_async("submit", payload, timeout=timeout))

    def submit_payload(self, payload: bytes, *, timeout: float | None = None) -> Receipt:
        """Send raw wire bytes as they are (for tests of hostile input and for other clients)."""
        return _receipt(self._call("submit", payload, timeout=timeout))

    # -- other writes -----------------------------------------------------------

    @staticmethod
    def _observation(kind: str, text: str, session: str, event_id: str | None = None) -> list[Any]:
        _check_text(kind, "kind")
        _check_text(text, "text")
        _check_text(session, "session")
        return [kind, text, session, event_id if event_id is not None else new_event_id()]

    def observe(
        self, kind: str, text: str, *, session: str = "main", event_id: str | None = None
    ) -> dict[str, Any]:
        """Record an observation; ``{"ref", "id", "duplicate"}``. Retries are idempotent.

        With *event_id* (``ev:`` + 20 hex digits) the caller names the event: a
        second observation under the same id answers the first (``duplicate``).
        """
        item = self._observation(kind, text, session, event_id)
        return dict(open_reply(self._call("observe_many", [item]))[0])

    async def observe_async(self, kind: str, text: str, *, session: str = "main") -> dict[str, Any]:
        """:meth:`observe` for event loops."""
        item = self._observation(kind, text, session)
        return dict(open_reply(await self._call_async("observe_many", [item]))[0])

    def observe_many(
        self, items: Iterable[tuple[str, str, str] | tuple[str, str, str, str | None]]
    ) -> list[dict[str, Any]]:
        """Record ``(kind, text, session[, event_id])`` observations in one durable write."""
        batch = [self._observation(*item) for item in items]
        return list(open_reply(self._call("observe_many", batch)))

    def claim(self) -> dict[str, Any]:
        """Claim the waiting inputs as one batch (R20): tick, advanced, claimed, finalized."""
        return dict(open_reply(self._call("claim")))

    async def claim_async(self) -> dict[str, Any]:
        """:meth:`claim` for event loops."""
        return dict(open_reply(await self._call_async("claim")))

    def deliver(self, ref: str) -> dict[str, Any]:
        """Mark the user request *ref* delivered (R19)."""
        return dict(open_reply(self._call("deliver", _check_text(ref, "ref"))))

    # -- reads ------------------------------------------------------------------

    def frame(self, frame_id: str) -> dict[str, Any]:
        """The frame as a dict (body, revision, sources, lifecycle, relations); NotFound."""
        return dict(open_reply(self._call("frame", _check_text(frame_id, "frame id"))))

    async def frame_async(self, frame_id: str) -> dict[str, Any]:
        """:meth:`frame` for event loops."""
        raw = await self._call_async("frame", _check_text(frame_id, "frame id"))
        return dict(open_reply(raw))

    def snapshot(self, frame_ids: Iterable[str]) -> dict[str, Any]:
        """One consistent read of the version and some frames; see ContextActor.snapshot."""
        ids = [_check_text(f, "frame id") for f in frame_ids]
        return dict(open_reply(self._call("snapshot", ids)))

    async def snapshot_async(self, frame_ids: Iterable[str]) -> dict[str, Any]:
        """:meth:`snapshot` for event loops."""
        ids = [_check_text(f, "frame id") for f in frame_ids]
        return dict(open_reply(await self._call_async("snapshot", ids)))

    def state(self) -> dict[str, Any]:
        """Version, tick, every frame, event and relation, and the sessions."""
        return dict(open_reply(self._call("state")))

    async def state_async(self) -> dict[str, Any]:
        """:meth:`state` for event loops."""
        return dict(open_reply(await self._call_async("state")))

    def event(self, ref: str) -> dict[str, Any]:
        """An event's metadata; NotFound if unknown."""
        return dict(open_reply(self._call("event", _check_text(ref, "ref"))))

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """Characters ``[offset, offset+length)`` of an event's original text (R28)."""
        _check_text(ref, "ref")
        _check_int(offset, "offset")
        if length is not None:
            _check_int(length, "length")
        return dict(open_reply(self._call("read_event", ref, offset, length)))

    def history(self, frame_id: str) -> list[dict[str, Any]]:
        """Every committed write of *frame_id* (R29)."""
        return list(open_reply(self._call("history", _check_text(frame_id, "frame id"))))

    def version(self) -> int:
        """The current version."""
        return int(open_reply(self._call("version")))

    async def version_async(self) -> int:
        """:meth:`version` for event loops."""
        return int(open_reply(await self._call_async("version")))

    def meta(self) -> dict[str, Any]:
        """The counters: version, tick, window, next_seq, history_keep, created."""
        return dict(open_reply(self._call("meta")))

    def txlog(self, version: int) -> dict[str, Any]:
        """The log record of the transaction committed at *version*; NotFound."""
        return dict(open_reply(self._call("txlog", _check_int(version, "version"))))

    def export(self, after_version: int = 0, *, page: int = MAX_EXPORT_PAGE) -> dict[str, Any]:
        """The whole history after *after_version*, paged under the hood; see ContextActor.export.

        ``log`` holds every record after *after_version*; ``frames``, ``events``
        and ``relations`` come from the same snapshot as the last record.
        """
        after = _check_int(after_version, "after_version")
        log: list[Any] = []
        while True:
            doc = unpack(self._call("export", after, page))
            if isinstance(doc, dict) and "error" in doc and "log" not in doc:
                raise_error(doc["error"])
            log.extend(doc["log"])
            if not doc["more"]:
                doc["log"] = log
                return dict(doc)
            after = doc["log"][-1]["version"] if doc["log"] else after + page

    # -- the agent loop -----------------------------------------------------------

    def compile(
        self,
        session: str,
        config: Any = None,
        previous: Any = None,
        overflow: bool = False,
    ) -> Any:
        """The model input for *session*, compiled by the context actor (a ``CompiledInput``).

        *config* is a :class:`~protocol.compiler.CompilerConfig` (or its dict),
        *previous* the ``CompiledInput`` of the call before.
        """
        from protocol.turns import CompiledInput

        cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
        prev = previous.model_dump(mode="json") if previous is not None else None
        raw = self._call(
            "compile_input", _check_text(session, "session"), cfg, prev, bool(overflow)
        )
        return CompiledInput.model_validate(open_reply(raw))

    def record_trace(self, trace: dict[str, Any]) -> None:
        """Append a model-call trace (R39)."""
        if not isinstance(trace, dict):
            raise RequestError("a trace is a dict", code="bad_argument")
        open_reply(self._call("record_trace", trace))

    def traces(
        self, *, frame: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Model-call traces numbered above *after*; with *frame*, the calls it took part in."""
        return list(open_reply(self._call("traces", frame, _check_int(after, "after"), limit)))

    def recall_observation(
        self, request: dict[str, Any], session: str = "main", cursor: str | None = None
    ) -> dict[str, Any]:
        """Recall one page into a ``recall_result`` observation.

        Answers ``{"ref", "nodes", "edges", "recalled", "next_cursor"}``.
        """
        raw = self._call("recall_observation", request, _check_text(session, "session"), cursor)
        return dict(open_reply(raw))

    def search(self, args: dict[str, Any], session: str = "main") -> dict[str, Any]:
        """A model's search into a ``recall_result`` observation (needs ``recall``).

        *args* are the ``search`` tool's (see :func:`storage.search.index.model_search`);
        answers ``{"ref", "hits", "recalled", "lag"}``.
        """
        raw = self._call("search", args, _check_text(session, "session"))
        return dict(open_reply(raw))

    # -- governance ---------------------------------------------------------------

    def audit(self, after: int = 0, limit: int = MAX_AUDIT_PAGE) -> list[dict[str, Any]]:
        """Durable audit entries numbered above *after* (at most *limit*, 1 to 1000).

        Denials, exports, imports and governance decisions, each with its
        ``seq``; page on with ``after=entries[-1]["seq"]``. Needs ``admin``.
        """
        check_page(after, limit)
        return list(open_reply(self._call("audit", after, limit)))

    def admit(self, frame_id: str | None = None) -> dict[str, Any]:
        """Run the actor's admission policy: ``{"decisions", "version"}``; needs ``admin``."""
        if frame_id is not None:
            _check_text(frame_id, "frame id")
        return dict(open_reply(self._call("admit", frame_id)))

    def review(
        self, frame_id: str, decision: str, reviewer: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """A human ``accept`` or ``reject`` of a candidate or quarantined frame.

        ``{"decision", "version"}``; a bad decision word or reviewer is refused
        here, before any remote call. Needs ``admin``.
        """
        _check_text(frame_id, "frame id")
        check_review(decision, reviewer, reason)
        return dict(open_reply(self._call("review", frame_id, decision, reviewer, reason)))

    def pending(self) -> dict[str, Any]:
        """What awaits a human or admission: ``{"version", "items"}``; needs ``admin``."""
        return dict(open_reply(self._call("pending")))

    def quarantine_scan(
        self, *, unused_ticks: int | None = None, failed_uses: int = 3
    ) -> dict[str, Any]:
        """Find and quarantine low-quality frames: ``{"findings", "quarantined", "spared",
        "version"}``; frames a human accepted are spared. Needs ``admin``."""
        check_scan(unused_ticks, failed_uses)
        return dict(open_reply(self._call("quarantine_scan", unused_ticks, failed_uses)))

    def export_frame(self, frame_id: str) -> bytes:
        """A sealed package of one frame (see :func:`actors.guard.export_frame`)."""
        return bytes(open_reply(self._call("export_frame", _check_text(frame_id, "frame id"))))

    def import_frame(self, package: bytes, as_id: str | None = None) -> dict[str, Any]:
        """Derive a frame from a package (see :func:`actors.guard.import_frame`)."""
        if not isinstance(package, bytes):
            raise RequestError("a package is bytes", code="bad_argument")
        if as_id is not None:
            _check_text(as_id, "frame id")
        return dict(open_reply(self._call("import_frame", package, as_id)))

    def handshake(self) -> dict[str, Any]:
        """Name, store directory, node, open error, tenant, project and enforcement."""
        return dict(self._call("handshake"))

    # -- introspection ----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Group-commit counters of the actor process: batches, transactions, …"""
        return dict(self._call("stats"))

    def describe(self) -> dict[str, Any]:
        """Name, store directory, node id, pid and open error of the actor."""
        return dict(self._call("describe"))

    def pid(self) -> int:
        """The actor's process id."""
        return int(self._call("pid"))

    def node_id(self) -> str:
        """The node the actor runs on."""
        return str(self._call("node_id"))

    def shutdown(self, *, wait: float = 10.0) -> None:
        """Stop the actor for good (no restart); its store closes with the process.

        ``ray.kill`` only sends the kill, so this waits (up to *wait* seconds) until
        the name is gone from the cluster: a call made after ``shutdown`` fails.
        It polls the name registry, never the dying actor (a call to it would be
        retried and logged by Ray).
        """
        import ray

        ray.kill(self._actor, no_restart=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                ray.get_actor(actor_name(self.name), namespace=self.namespace)
            except ValueError:
                return
            time.sleep(0.05)


def connect(
    name: str,
    *,
    store_dir: str | os.PathLike[str],
    node_id: str | None = None,
    create: bool = True,
    namespace: str = DEFAULT_NAMESPACE,
    window: int | None = None,
    history_keep: int | None = None,
    lifetime: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    tenant: str | None = None,
    project: str | None = None,
    enforce: bool = False,
    capability: bytes | None = None,
    governance_every: float | None = None,
    governance_unused_ticks: int | None = None,
    admission: AdmissionPolicy | None = None,
) -> ContextHandle:
    """Get or create the actor of context *name* and return its handle.

    The actor (``ctx:<name>`` in *namespace*) serves ``<store_dir>/<name>``,
    the same layout as ``morphz --store``. It is pinned to *node_id* (default:
    this node), the node whose disk holds the store; *store_dir* is a path on
    that node (made absolute here). ``lifetime="detached"`` lets the actor
    outlive the process that created it; otherwise it dies with its creator.
    If the actor already exists it is returned as it is, after checking it
    serves the same store directory (and the same node, when *node_id* is
    given). Raises the typed error of a failed open (``NotFound`` when
    ``create=False`` and the context does not exist, ``StoreLocked`` …).

    Governance (docs/permissions.md): the context belongs to *tenant* and
    *project* (stored on creation; naming others later raises ``RequestError``
    code ``scope_mismatch``). With ``enforce=True`` (sticky) every call must
    carry a capability: the handle sends *capability* with each call.
    *admission* is the actor's admission policy (default ``DefaultPolicy``);
    with *governance_every* seconds the actor runs admission and the quarantine
    scan unattended that often (*governance_unused_ticks* enables the
    ``unused`` rule). These three apply when the actor is created.
    """
    check_context_name(name)
    if not isinstance(store_dir, (str, os.PathLike)):
        raise RequestError("store_dir must be a path", code="bad_argument")
    where = os.path.abspath(os.fspath(store_dir))
    _check_text(namespace, "namespace")
    if not namespace:
        raise RequestError("namespace must not be empty", code="bad_argument")
    if window is not None and not (
        isinstance(window, int) and not isinstance(window, bool) and 0 <= window <= MAX_WINDOW
    ):
        raise RequestError(f"window must be between 0 and {MAX_WINDOW} ticks", code="bad_argument")
    if history_keep is not None:
        _check_int(history_keep, "history_keep", 1)
    if lifetime not in (None, "detached"):
        raise RequestError("lifetime is None or 'detached'", code="bad_argument")
    if governance_every is not None:
        check_every(governance_every)
    check_scan(governance_unused_ticks, 3)
    ensure_ray()
    node = check_node(node_id) if node_id is not None else current_node_id()
    actor = (
        _actor_class()
        .options(
            name=actor_name(name),
            namespace=namespace,
            get_if_exists=True,
            lifetime=lifetime,
            max_restarts=-1,
            max_task_retries=-1,
            max_concurrency=MAX_CONCURRENCY,
            num_cpus=0,
            scheduling_strategy=pinned(node),
        )
        .remote(
            where,
            name,
            window,
            history_keep,
            create,
            tenant=tenant,
            project=project,
            enforce=bool(enforce),
            governance_every=governance_every,
            governance_unused_ticks=governance_unused_ticks,
            admission=admission,
        )
    )
    handle = ContextHandle(
        actor, name, namespace=namespace, retry=retry, timeout=timeout, capability=capability
    )
    info = handle.handshake()
    if info["open_error"] is not None:
        handle.shutdown()
        raise_error(info["open_error"])
    if info["store_dir"] != where:
        raise RequestError(
            f"context {name!r} is already served from {info['store_dir']}, not {where}",
            code="context_elsewhere",
        )
    if node_id is not None and info["node_id"] != node_id:
        raise RequestError(
            f"context {name!r} is already served on node {info['node_id']}, not {node_id}",
            code="context_elsewhere",
        )
    for field, want in (("tenant", tenant), ("project", project)):
        if want is not None and info[field] != want:
            raise RequestError(
                f"context {name!r} belongs to {field} {info[field]!r}, not {want!r}",
                code="scope_mismatch",
            )
    if enforce and not info["enforce"]:
        raise RequestError(
            f"context {name!r} is already served without enforcement", code="scope_mismatch"
        )
    return handle


def lookup(
    name: str,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    capability: bytes | None = None,
) -> ContextHandle:
    """The handle of the running context actor *name*, from anywhere in the cluster.

    Raises :class:`NotFound` if no such actor exists in *namespace*.
    """
    check_context_name(name)
    _check_text(namespace, "namespace")
    ensure_ray()
    import ray

    try:
        actor = ray.get_actor(actor_name(name), namespace=namespace)
    except ValueError as e:
        raise NotFound(f"no context actor {name!r} in namespace {namespace!r}") from e
    return ContextHandle(
        actor, name, namespace=namespace, retry=retry, timeout=timeout, capability=capability
    )
