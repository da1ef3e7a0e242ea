"""The one seam between a client handle and Ray: remote calls, retries, error translation.

:class:`Transport` calls the methods of one named actor and owns everything a
remote call needs beyond its arguments:

* Ray itself, through :mod:`actors.client.joining` (the lazy import and the join,
  :func:`~actors.client.joining.init_ray`): importing this module does not import Ray;
* the timeout of each attempt and the retry policy for calls that could not
  reach the actor or whose reply was lost (:class:`RetryPolicy`: exponential
  backoff with jitter);
* the re-lookup of an actor recreated under its name after it died for good,
  and of a replicated context's new primary after a promotion: when the actor
  is lost or answers ``fenced`` / ``stale_epoch``, the context directory
  (``actors.cluster.directory``) is asked which actor is the primary now, so a handle
  follows a failover without its user doing anything; a call to a replicated
  context's primary that waits more than :data:`WATCH_EVERY` for its reply asks the
  directory too (a paused or partitioned primary answers nothing);
* the translation of Ray's errors into the library's own, with
  ``raise … from e``: an error the actor raised on purpose is re-raised as its
  own class, an actor method that failed otherwise is a
  :class:`~protocol.errors.StoreError` (code ``actor_error``), and an actor that
  cannot be reached after the retries, a timeout or a Ray system failure is a
  :class:`~protocol.errors.TransportError` (``actor_unavailable`` /
  ``actor_error``).

:class:`Remote` turns one *call spec* — a method that checks its arguments and
returns a :class:`Call` (actor method, arguments, reply decoder) — into both a
blocking method and, through :attr:`Remote.aio`, its ``async`` form, so a
handle writes each method once.

Every path of a remote call (timeouts, retries, promotions, the translation of Ray's
errors) is this one seam: a handle of a context in its own actor, of a context on a
host (calls routed by the context's name) and of the directory all go through the
same :class:`Transport`. It is kept as one module because those paths share one retry
loop: following a promotion, a host move and a new directory leader are branches of it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import update_wrapper
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from actors.client.joining import ray_module
from actors.client.leader import directory_actor, directory_target, leader_name
from actors.client.names import (
    CONTEXT_PREFIX,
    DEFAULT_NAMESPACE,
    ContextEntry,
    is_directory,
    is_host,
)
from actors.client.replies import open_reply
from protocol.errors import (
    CONTEXT_MOVED,
    FENCED,
    HOST_FULL,
    NOT_LEADER,
    PROMOTING,
    STALE_EPOCH,
    MorphzError,
    RequestError,
    StoreError,
    TransportError,
)

FAILOVER_WAIT = 60.0
"""Seconds a call to a replicated context's lost primary keeps retrying for its successor."""
DIRECTORY_WAIT = 10.0
"""Seconds a handle waits for the directory to say where a context's primary is."""
FAILOVER_POLL = 0.25
"""Longest pause between two attempts while a replicated context's primary is replaced."""
PROMOTING_POLL = 0.05
"""Pause before calling again a promoted follower that answered ``promoting`` (its promotion
is under way: the directory names it already)."""
WATCH_EVERY = 0.2
"""Seconds a call to a replicated context's primary waits for its reply before asking the
directory whether that primary was replaced (a lost, paused or partitioned primary answers
nothing, and a call without a timeout would wait for it forever); if it was, the call is
sent again to the new primary at once, under the same client id. Then again every that
many seconds while it waits: one directory read per waiting call and fifth of a second,
paid only by calls slower than that."""


class PrimaryReplaced(TimeoutError):
    """The primary a call waits for was replaced meanwhile (*entry*: the directory's entry
    naming its successor; None for a directory's handle, whose successor the lead record
    names): the call is sent again, to the successor."""

    def __init__(self, message: str, entry: ContextEntry | None) -> None:
        super().__init__(message)
        self.entry = entry


P = ParamSpec("P")
T = TypeVar("T")


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


@dataclass(frozen=True)
class Call(Generic[T]):
    """One remote call: the actor *method*, its *args*, and how to *decode* the reply.

    *timeout* (seconds per attempt) overrides the transport's; *guarded* says
    whether the call carries the handle's capability.
    """

    method: str
    args: tuple[Any, ...] = ()
    decode: Callable[[Any], T] = field(default=lambda raw: raw)
    timeout: float | None = None
    guarded: bool = True


class Transport:
    """Calls one named actor's methods with retries; picklable (it holds an actor handle).

    *actor* is the Ray actor handle, *actor_name* its name in *namespace* (for
    the re-lookup after a restart), *label* how errors name it.
    """

    def __init__(
        self,
        actor: Any,
        actor_name: str,
        *,
        label: str,
        namespace: str = DEFAULT_NAMESPACE,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        capability: bytes | None = None,
    ) -> None:
        if capability is not None and not isinstance(capability, bytes):
            raise RequestError("a capability is token bytes", code="bad_argument")
        self.actor = actor
        self.actor_name = actor_name
        self.label = label
        self.namespace = namespace
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.capability = capability
        self.replicated: bool | None = None
        """Whether the directory says this context is replicated (asked at the first call).
        Calls to a replicated context are not retried by Ray itself (a lost primary fails
        them at once) and a lost actor is waited for up to :data:`FAILOVER_WAIT` seconds
        while its successor is promoted."""
        self._origin: Transport | None = None
        """The transport this one was copied from (:meth:`with_capability`), if any."""
        self._methods: dict[tuple[str, bool], Any] = {}
        """The Ray methods of :attr:`actor` called so far, with their options, by name and
        whether the context is replicated (:meth:`_method`)."""
        self._methods_of: Any = None
        """The actor handle :attr:`_methods` belong to."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_methods"], state["_methods_of"] = {}, None  # rebuilt on first use
        return state

    def with_capability(self, capability: bytes | None) -> Transport:
        """The same actor and policy, calls carrying *capability*.

        The copy shares what the original learned about the context (whether it is
        replicated) and teaches it back, so a server making a copy per request asks
        the context directory once per context, not once per request."""
        copy = Transport(
            self.actor,
            self.actor_name,
            label=self.label,
            namespace=self.namespace,
            retry=self.retry,
            timeout=self.timeout,
            capability=capability,
        )
        copy.replicated = self.replicated
        copy._origin = self._origin or self
        return copy

    def _send(self, call: Call[Any]) -> Any:
        kwargs = (
            {} if self.capability is None or not call.guarded else {"capability": self.capability}
        )
        if self.replicated is None:
            origin = self._origin
            if origin is not None and origin.replicated is not None:
                self.replicated = origin.replicated
            else:
                self.replicated = self._is_replicated()  # a directory call: once per context
                if origin is not None:
                    origin.replicated = self.replicated
        if is_host(self.actor_name):  # a context among many in one host process: by name
            return self._method("call").remote(self.label, call.method, list(call.args), kwargs)
        return self._method(call.method).remote(*call.args, **kwargs)

    def _method(self, name: str) -> Any:
        """The Ray method *name* of :attr:`actor`, with this context's options (a replicated
        one's calls are not retried by Ray). Kept per actor handle: reading a method off a
        Ray actor handle builds a new bound method each time, and ``options`` another
        wrapper; a new handle (a promotion, a restart) starts afresh."""
        actor, replicated = self.actor, bool(self.replicated)
        if self._methods_of is not actor:
            self._methods, self._methods_of = {}, actor
        method = self._methods.get((name, replicated))
        if method is None:
            method = getattr(actor, name)
            if replicated:
                method = method.options(max_task_retries=0)
            self._methods[name, replicated] = method
        return method

    def _serves_context(self) -> bool:
        """True if this transport calls a context (its own actor, or the host it is on)."""
        return self.actor_name.startswith(CONTEXT_PREFIX) or is_host(self.actor_name)

    def _is_replicated(self) -> bool:
        """True if the context directory of this namespace has this context replicated."""
        if not self._serves_context():
            return False
        entry = self._directory_entry()
        return entry is not None and entry.replicated

    def _directory_entry(self) -> ContextEntry | None:
        """This context's entry in its namespace's context directory (the leading one:
        :func:`~actors.client.leader.directory_actor`), or None."""
        ray = ray_module()
        try:
            directory = directory_actor(self.namespace)
            if directory is None:
                return None
            raw = ray.get(directory.get.remote(self.label), timeout=DIRECTORY_WAIT)
            return ContextEntry.model_validate(open_reply(raw))
        except (MorphzError, ValueError):  # no directory, no entry, or not an entry
            return None
        except Exception:  # the directory is restarting or unreachable: ask again later
            return None

    def _wait(self, call: Call[Any]) -> float | None:
        return self.timeout if call.timeout is None else call.timeout

    def _replaced(self) -> ContextEntry | None:
        """The directory's entry if it names another primary than the actor this handle
        calls, else None."""
        if not self._serves_context():
            return None
        entry = self._directory_entry()
        return entry if entry is not None and entry.primary.actor != self.actor_name else None

    def _leader_moved(self) -> bool:
        """For a directory's handle: True if the lead record names another directory."""
        if not is_directory(self.actor_name):
            return False
        leader = leader_name(self.namespace)
        return leader is not None and leader != self.actor_name

    def _successor(self, e: PrimaryReplaced) -> bool:
        """Switch to the successor *e* names (a directory's: the lead record's); True if the
        handle now calls another actor."""
        return self._follow_leader() if e.entry is None else self._switch(e.entry)

    def _slices(self, timeout: float | None) -> tuple[float | None, float | None]:
        """The deadline of a call, and how long to wait at once (replicated: a slice)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        watched = self.replicated or is_directory(self.actor_name)
        return deadline, (WATCH_EVERY if watched else None)

    def _await(self, ref: Any, timeout: float | None) -> Any:
        """The reply of *ref*; for a replicated context, :class:`PrimaryReplaced` as soon as
        the directory names another primary while it waits (see :data:`WATCH_EVERY`)."""
        ray = ray_module()
        deadline, every = self._slices(timeout)
        if every is None:
            return ray.get(ref, timeout=timeout)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return ray.get(ref, timeout=every if left is None else min(left, every))
            except TimeoutError:  # Ray's GetTimeoutError
                if left is not None and left <= every:
                    raise
                if self._leader_moved():
                    raise PrimaryReplaced(f"{self.actor_name} no longer leads", None) from None
                entry = self._replaced()
                if entry is not None:
                    raise PrimaryReplaced(f"{self.actor_name} was replaced", entry) from None

    async def _await_async(self, ref: Any, timeout: float | None) -> Any:
        """:meth:`_await` for event loops."""
        deadline, every = self._slices(timeout)
        if every is None:
            # The reference is awaited as it is: wait_for would wrap it in a task of its
            # own on every call (asyncio.timeout cancels this task's await instead).
            if timeout is None:
                return await ref
            async with asyncio.timeout(timeout):
                return await ref
        reply = asyncio.wrap_future(ref.future())
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                wait = every if left is None else min(left, every)
                return await asyncio.wait_for(asyncio.shield(reply), wait)
            except TimeoutError:
                if left is not None and left <= every:
                    reply.cancel()
                    raise
                if await asyncio.to_thread(self._leader_moved):
                    reply.cancel()
                    raise PrimaryReplaced(f"{self.actor_name} no longer leads", None) from None
                entry = await asyncio.to_thread(self._replaced)
                if entry is not None:
                    reply.cancel()
                    raise PrimaryReplaced(f"{self.actor_name} was replaced", entry) from None

    def _retry_after(self, e: BaseException, retry: int, started: float | None = None) -> float:
        """The delay before the next attempt after *e*; raises the translated error if none."""
        from ray.exceptions import ActorUnschedulableError, RayActorError, RayError, RayTaskError

        lost = isinstance(e, (RayActorError, ActorUnschedulableError, TimeoutError))
        if lost and self.replicated and started is not None:
            # A replicated context's primary was lost: wait for its promoted successor.
            if time.monotonic() - started < FAILOVER_WAIT:
                return min(self.retry.delay(min(retry, 2)) or 0.0, FAILOVER_POLL)
        if lost and is_directory(self.actor_name) and started is not None:
            # The directory's node was lost: wait for its standby to take over (it claims
            # the next term within a second or two of the node's loss).
            if time.monotonic() - started < DIRECTORY_WAIT:
                return min(self.retry.delay(min(retry, 2)) or 0.0, FAILOVER_POLL)
        if isinstance(e, ActorUnschedulableError):  # its node is gone for good
            delay = self.retry.delay(retry)
            if delay is None:
                raise TransportError(
                    f"context actor {self.label!r} unavailable: {e}", code="actor_unavailable"
                ) from e
            return delay

        if isinstance(e, RayTaskError):
            cause = getattr(e, "cause", None)
            if isinstance(cause, MorphzError):
                if cause.code == PROMOTING and started is not None:
                    if time.monotonic() - started < FAILOVER_WAIT:  # opening as the primary
                        return PROMOTING_POLL
                raise cause from e
            raise StoreError(
                f"context actor {self.label!r} failed: {cause or e}", code="actor_error"
            ) from e
        if isinstance(e, (RayActorError, TimeoutError)):  # GetTimeoutError is a TimeoutError
            delay = self.retry.delay(retry)
            if delay is None:
                raise TransportError(
                    f"context actor {self.label!r} unavailable after "
                    f"{self.retry.attempts} retries: {e}",
                    code="actor_unavailable",
                ) from e
            return delay
        if isinstance(e, RayError):
            raise TransportError(f"context actor {self.label!r}: {e}", code="actor_error") from e
        raise e

    def _follow_leader(self) -> bool:
        """For a directory's handle: switch to the directory the lead record names, if it is
        another one; True if the handle now calls another actor."""
        target = directory_target(self.namespace)
        if target is None or target[0] == self.actor_name:
            return False
        self.actor_name, self.actor = target
        return True

    def _follow_promotion(self) -> bool:
        """If the context directory names another primary for this context, switch to it.
        A directory's handle follows the lead record instead (:meth:`_follow_leader`).

        Only a context actor (named ``ctx:…``) in a namespace that has a directory
        with an entry for it is followed; True if the handle now calls another actor.
        """
        if is_directory(self.actor_name):
            return self._follow_leader()
        if not self._serves_context():
            return False
        entry = self._directory_entry()
        return entry is not None and self._switch(entry)

    def _switch(self, entry: ContextEntry) -> bool:
        """Call the primary *entry* names from now on; True if that is another actor (False
        also when it is not running yet: the next attempt asks again)."""
        self.replicated = entry.replicated
        primary = entry.primary.actor
        if primary == self.actor_name:
            return False
        try:
            self.actor = ray_module().get_actor(primary, namespace=self.namespace)
        except ValueError:
            return False  # not started yet: the next attempt asks again
        self.actor_name = primary
        return True

    def _relookup(self, e: BaseException) -> None:
        """After the actor was lost, pick up its replacement: the primary the directory
        names now (a promotion), else an actor recreated under the same name."""
        from ray.exceptions import ActorDiedError, ActorUnschedulableError, RayActorError

        if not isinstance(e, (RayActorError, ActorUnschedulableError, TimeoutError)):
            return
        if self._follow_promotion() or not isinstance(e, ActorDiedError):
            return
        try:
            self.actor = ray_module().get_actor(self.actor_name, namespace=self.namespace)
        except ValueError:
            if is_host(self.actor_name):  # a host stopped for good: the directory moves it
                self._rehost()

    def _rehost(self) -> bool:
        """Ask the directory to move this hosted context off the host this handle calls
        (gone for good, or full while the context is idle there) and switch to the host
        it names; True if the handle now calls another host."""
        ray = ray_module()
        try:
            directory = directory_actor(self.namespace)
            if directory is None:
                return False
            raw = ray.get(
                directory.rehost.remote(self.label, self.actor_name, self.capability),
                timeout=DIRECTORY_WAIT,
            )
            entry = ContextEntry.model_validate(open_reply(raw))
        except (MorphzError, ValueError):  # no directory, no entry, no host with room
            return False
        except Exception:  # the directory is restarting or unreachable
            return False
        if entry.primary.actor == self.actor_name:
            return False
        return self._follow_promotion()

    def _redirect(self, e: BaseException, retry: int) -> float | None:
        """For a context on a host: the delay before calling it again when *e* says it is
        elsewhere now (``context_moved``: the directory names its new host) or its host is
        full and the directory moved it (``host_full``); None when *e* is neither (or the
        retries are spent), so it is raised as usual."""
        cause = getattr(e, "cause", None)
        if not is_host(self.actor_name) or not isinstance(cause, MorphzError):
            return None
        if cause.code == CONTEXT_MOVED:
            delay = self.retry.delay(retry)
            if delay is not None:
                self._follow_promotion()
            return delay
        if cause.code == HOST_FULL and retry < self.retry.attempts and self._rehost():
            return 0.0
        return None

    def _fenced(self, e: MorphzError, retry: int) -> float | None:
        """The delay before calling the new primary after *e* said this one was replaced."""
        if e.code == NOT_LEADER and is_directory(self.actor_name):
            return self.retry.delay(retry)  # a standby, or deposed: the leader is asked
        if e.code not in (FENCED, STALE_EPOCH) or not self._serves_context():
            return None
        delay = self.retry.delay(retry)
        if delay is None:
            return None
        return delay

    def call(self, call: Call[T]) -> T:
        """Run *call* and decode its reply, retrying lost replies, restarts and promotions."""
        retry, started = 0, time.monotonic()
        while True:
            try:
                raw = self._await(self._send(call), self._wait(call))
            except Exception as e:
                if isinstance(e, PrimaryReplaced) and self._successor(e):
                    retry += 1  # its successor is known and running: call it now
                    continue
                moved = self._redirect(e, retry)
                if moved is not None:
                    retry += 1
                    time.sleep(moved)
                    continue
                delay = self._retry_after(e, retry, started)
                retry += 1
                time.sleep(delay)
                self._relookup(e)
                continue
            try:
                return call.decode(raw)
            except MorphzError as e:  # a replaced primary: call the one that replaced it
                wait = self._fenced(e, retry)
                if wait is None:
                    raise
                retry += 1
                time.sleep(wait)
                if not self._follow_promotion():
                    continue

    async def call_async(self, call: Call[T]) -> T:
        """:meth:`call` for event loops."""
        retry, started = 0, time.monotonic()
        while True:
            try:
                raw = await self._await_async(self._send(call), self._wait(call))
            except Exception as e:
                if isinstance(e, PrimaryReplaced) and await asyncio.to_thread(self._successor, e):
                    retry += 1  # its successor is known and running: call it now
                    continue
                hosted = is_host(self.actor_name)
                moved = await asyncio.to_thread(self._redirect, e, retry) if hosted else None
                if moved is not None:
                    retry += 1
                    await asyncio.sleep(moved)
                    continue
                delay = self._retry_after(e, retry, started)
                retry += 1
                await asyncio.sleep(delay)
                await asyncio.to_thread(self._relookup, e)
                continue
            try:
                return call.decode(raw)
            except MorphzError as e:
                wait = self._fenced(e, retry)
                if wait is None:
                    raise
                retry += 1
                await asyncio.sleep(wait)
                await asyncio.to_thread(self._follow_promotion)

    def kill(self, *, wait: float = 10.0) -> None:
        """Stop the actor for good and wait (up to *wait* s) until its name is gone.

        It polls the name registry, never the dying actor (a call to it would be
        retried and logged by Ray). A context on a host is deactivated and forgotten
        there instead: the host and its other contexts keep running.
        """
        ray = ray_module()
        if is_host(self.actor_name):
            ray.get(self.actor.deactivate.remote(self.label, True), timeout=wait)
            return
        ray.kill(self.actor, no_restart=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                ray.get_actor(self.actor_name, namespace=self.namespace)
            except ValueError:
                return
            time.sleep(0.05)


class HasTransport(Protocol):
    """What :class:`Remote` needs of the object it is read from."""

    @property
    def transport(self) -> Transport: ...


H = TypeVar("H", bound=HasTransport)


class Remote(Generic[H, P, T]):
    """A blocking method made from a call spec; :attr:`aio` is its ``async`` form.

    The spec checks the arguments (raising before any remote call) and returns
    the :class:`Call`; the method runs it through the owner's ``transport``::

        @Remote
        def frame(self, frame_id: str) -> Call[FrameReply]:
            return Call("frame", (check_text(frame_id, "frame id"),), decode_frame)

        frame_async = frame.aio
    """

    def __init__(self, spec: Callable[Concatenate[H, P], Call[T]]) -> None:
        self.spec = spec
        self.aio: RemoteAsync[H, P, T] = RemoteAsync(spec)
        update_wrapper(self, spec)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type) -> Remote[H, P, T]: ...
    @overload
    def __get__(self, obj: H, owner: type) -> Callable[P, T]: ...
    def __get__(self, obj: H | None, owner: type) -> Remote[H, P, T] | Callable[P, T]:
        if obj is None:
            return self
        spec, transport = self.spec, obj.transport

        def method(*args: P.args, **kwargs: P.kwargs) -> T:
            return transport.call(spec(obj, *args, **kwargs))

        update_wrapper(method, spec)
        return method


class RemoteAsync(Generic[H, P, T]):
    """The ``async`` form of a :class:`Remote` method (same spec, awaited call)."""

    def __init__(self, spec: Callable[Concatenate[H, P], Call[T]]) -> None:
        self.spec = spec
        self.__doc__ = f":meth:`{spec.__name__}` for event loops."

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    @overload
    def __get__(self, obj: None, owner: type) -> RemoteAsync[H, P, T]: ...
    @overload
    def __get__(self, obj: H, owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(
        self, obj: H | None, owner: type
    ) -> RemoteAsync[H, P, T] | Callable[P, Awaitable[T]]:
        if obj is None:
            return self
        spec, transport = self.spec, obj.transport

        async def method(*args: P.args, **kwargs: P.kwargs) -> T:
            return await transport.call_async(spec(obj, *args, **kwargs))

        method.__name__ = getattr(self, "__name__", spec.__name__ + "_async")
        method.__doc__ = self.__doc__
        return method


__all__ = [
    "DIRECTORY_WAIT",
    "FAILOVER_POLL",
    "FAILOVER_WAIT",
    "PROMOTING_POLL",
    "WATCH_EVERY",
    "Call",
    "HasTransport",
    "PrimaryReplaced",
    "Remote",
    "RemoteAsync",
    "RetryPolicy",
    "Transport",
]
