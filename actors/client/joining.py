"""Joining Ray: the lazy import, connecting this process, and whether a cluster accepts it.

:func:`ray_module` imports Ray on first use (importing the client does not, so the
store commands never pay its import time); :func:`init_ray` is the one place every
command and client that needs Ray connects this process: an explicit address, else
``RAY_ADDRESS``, else a new local cluster; an unreachable cluster is a
:class:`~protocol.errors.TransportError` ``ray_unreachable`` (:data:`RAY_UNREACHABLE`).
:func:`remote_class` makes a Ray actor class once.

Before joining a cluster: does it accept this process's credentials?

Ray's join (``ray.init(address=…)``) retries a refusal by a cluster that uses token
authentication for tens of seconds before it gives up with "Failed to connect".
:func:`check_authenticated` asks the cluster's GCS the first question a join asks
(its cluster id), once, with the credentials the join would send, and turns a
refusal into one :class:`~protocol.errors.TransportError` ``ray_unreachable`` that
says what to set, in well under a second. Ray decides what a join sends: for an
explicit address, a token only when ``RAY_AUTH_MODE=token`` (never the token file
on its own, which would hand it to whatever listens at the address). gRPC is
Ray's own dependency; both are imported only when a probe is made.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import sys
import tempfile
from types import ModuleType
from typing import Any

from protocol.errors import RequestError, TransportError

__all__ = [
    "GCS_PROBE",
    "PROBE_TIMEOUT",
    "RAY_UNREACHABLE",
    "REACH_TIMEOUT",
    "TOKEN_HINT",
    "check_authenticated",
    "check_int",
    "check_positive",
    "check_text",
    "init_ray",
    "ray_module",
    "remote_class",
]

PROBE_TIMEOUT = 5.0
"""Seconds the probe waits for the GCS's answer (no answer is left to the join)."""
RAY_UNREACHABLE = "ray_unreachable"
"""The error code of a Ray cluster that cannot be joined."""
GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""The GCS call a join makes first; the probe makes it once, beforehand, to learn
whether the cluster accepts this process's credentials (a refused join retries for long)."""
TOKEN_HINT = (
    "set RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token,"
    " RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)"
)
"""What to set when a cluster refuses a join for want of its token."""


def _token_metadata() -> tuple[tuple[str, str], ...] | None:
    """The credentials a join of this process sends (none unless RAY_AUTH_MODE=token, as
    Ray decides for an explicit address), or None when Ray's loader cannot be asked."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        return ()
    try:
        from ray._private.authentication import grpc_authentication_client_interceptor as auth

        return tuple(auth._get_authentication_metadata_tuple())
    except Exception:  # Ray's own join reports a missing token; the probe only saves time
        return None


def check_authenticated(target: str, address: str) -> None:
    """Ask the cluster's GCS at *target* the first question a join asks, with the
    credentials the join would send; refused for want of a token, raise ``ray_unreachable``
    with what to set, in well under :data:`PROBE_TIMEOUT` seconds (Ray's join retries such
    a refusal for tens of seconds). Any other answer, or no answer, is left to the join."""
    metadata = _token_metadata()
    if metadata is None:
        return
    import grpc

    channel = grpc.insecure_channel(target)
    try:
        channel.unary_unary(GCS_PROBE)(b"", timeout=PROBE_TIMEOUT, metadata=metadata)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAUTHENTICATED:
            return
        why = (
            "the cluster refused this process's token; check it is the cluster's"
            if metadata
            else "the cluster uses token authentication"
        )
        raise TransportError(
            f"cannot join the Ray cluster at {address}: {why}: {TOKEN_HINT}",
            code=RAY_UNREACHABLE,
        ) from e
    finally:
        channel.close()


REACH_TIMEOUT = 5.0
"""Seconds :func:`init_ray` waits for a ``host:port`` to accept a connection, and for its
answer to the authentication probe."""


def ray_module() -> ModuleType:
    """The ``ray`` module, imported on first use (never at this module's import)."""
    import ray

    return ray


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0].strip()


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` nobody listens on (``ray.init`` would wait for minutes),
    and on a cluster that refuses this process's credentials
    (:func:`~actors.client.joining.check_authenticated`)."""
    m = re.fullmatch(r"(?:ray://)?\[?([^\]\s]+?)\]?:(\d+)", address)
    if m is None:  # "auto" and the like: left to Ray
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=REACH_TIMEOUT).close()
    except (OSError, OverflowError, ValueError) as e:
        raise TransportError(
            f"cannot reach the Ray cluster at {address}: {_first_line(e)}", code=RAY_UNREACHABLE
        ) from e
    if not address.startswith("ray://"):  # a Ray client server is no GCS
        host = m.group(1)
        check_authenticated(f"[{host}]:{m.group(2)}" if ":" in host else address, address)


def init_ray(
    address: str | None = None,
    *,
    namespace: str | None = None,
    num_cpus: int | None = None,
) -> bool:
    """Connect this process to Ray unless it is connected; True if this call connected it.

    Where: *address* if given, else the ``RAY_ADDRESS`` environment variable,
    else a **new local cluster** (``address="local"``, no dashboard, *num_cpus*
    CPUs if given) — never a cluster Ray would find on its own, so a command
    run without an address does not attach to whatever happens to run on the
    machine. ``"auto"`` asks Ray to find the cluster started on this machine
    by ``ray start``; ``"local"`` always starts a new one. *num_cpus* applies
    only to a cluster started here (Ray refuses it when joining one).

    A process already connected (a test, a driver that called ``ray.init``)
    keeps its connection and this returns False; whoever gets True calls
    ``ray.shutdown()`` when done. A cluster that cannot be joined raises
    :class:`~protocol.errors.TransportError` with code ``ray_unreachable`` and
    a one-line message (a ``host:port`` nobody listens on fails within
    :data:`REACH_TIMEOUT` seconds instead of Ray's minutes of retries).
    """
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise RequestError("a Ray address is a non-empty string", code="bad_argument")
    if num_cpus is not None:
        check_int(num_cpus, "num_cpus", 1)
    target = (address or os.environ.get("RAY_ADDRESS") or "local").strip()
    ray = ray_module()
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {
        "address": target,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if namespace is not None:
        kwargs["namespace"] = check_text(namespace, "namespace")
    if target == "local":
        kwargs["include_dashboard"] = False
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    else:
        _check_reachable(target)
    where = "a new local Ray cluster" if target == "local" else f"the Ray cluster at {target}"
    try:
        if target == "local":
            ray.init(**kwargs)
        else:
            _join_quietly(ray, kwargs)
    except _JoinFailed as e:
        why = _first_line(e.cause)
        if "Unauthenticated" in e.logged or "InvalidAuthToken" in e.logged:
            why += f" (the cluster uses token authentication: {TOKEN_HINT})"
        raise TransportError(f"cannot join {where}: {why}", code=RAY_UNREACHABLE) from e.cause
    except Exception as e:  # Ray raises ConnectionError, ValueError, RuntimeError, …
        raise TransportError(f"cannot join {where}: {_first_line(e)}", code=RAY_UNREACHABLE) from e
    return True


class _JoinFailed(Exception):
    """``ray.init`` failed to join: its error and what Ray's core logged meanwhile."""

    def __init__(self, cause: Exception, logged: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.logged = logged


def _join_quietly(ray: ModuleType, kwargs: dict[str, Any]) -> None:
    """``ray.init(**kwargs)`` joining a cluster, Ray's native stderr held back meanwhile.

    The driver's core worker logs every failed attempt to reach the cluster (a
    line a second) on the process's stderr; a join that fails must be one error
    line. What it logged is written out after a successful join, and handed to
    the caller (:class:`_JoinFailed`) after a failed one. Joining starts no
    process, so none inherits the held-back stderr.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            ray.init(**kwargs)
        except Exception as e:
            os.dup2(saved, 2)
            held.seek(0)
            raise _JoinFailed(e, held.read().decode("utf-8", "replace")) from e
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        logged = held.read()
    if logged:
        os.write(2, logged)


def check_text(value: object, what: str) -> str:
    """*value* if it is a string; RequestError ``bad_argument`` otherwise."""
    if not isinstance(value, str):
        raise RequestError(
            f"{what} must be a string, not {type(value).__name__}", code="bad_argument"
        )
    return value


def check_int(value: object, what: str, low: int = 0) -> int:
    """*value* if it is an integer (not a bool) >= *low*; RequestError ``bad_argument``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise RequestError(
            f"{what} must be an integer >= {low}, not {value!r}", code="bad_argument"
        )
    return value


def check_positive(value: object, what: str) -> float:
    """*value* if it is a finite number (not a bool) > 0; RequestError ``bad_argument``."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise RequestError(f"{what} must be a number > 0, not {value!r}", code="bad_argument")
    return float(value)


_REMOTE_CLASSES: dict[tuple[type, tuple[tuple[str, int], ...]], Any] = {}


def remote_class(cls: type, concurrency_groups: dict[str, int] | None = None) -> Any:
    """``ray.remote(cls)``, made once per class and *concurrency_groups* (which Ray takes
    only here, never in ``.options()``)."""
    key = (cls, tuple(sorted((concurrency_groups or {}).items())))
    made = _REMOTE_CLASSES.get(key)
    if made is None:
        ray = ray_module()
        if concurrency_groups:
            made = ray.remote(concurrency_groups=concurrency_groups)(cls)
        else:
            made = ray.remote(cls)
        _REMOTE_CLASSES[key] = made
    return made
