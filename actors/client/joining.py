"""Before joining a Ray cluster: does it accept this process's credentials?

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

import os

from protocol.errors import TransportError

__all__ = ["GCS_PROBE", "PROBE_TIMEOUT", "TOKEN_HINT", "check_authenticated"]

PROBE_TIMEOUT = 5.0
"""Seconds the probe waits for the GCS's answer (no answer is left to the join)."""
RAY_UNREACHABLE = "ray_unreachable"
"""The code of the error (as :data:`actors.client.transport.RAY_UNREACHABLE`)."""
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
