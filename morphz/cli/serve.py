"""``morphz serve``: the HTTP API (:mod:`servers.http_api`) as a Ray Serve application.

It joins Ray (``--address``, then ``RAY_ADDRESS``, else a new local cluster),
serves on ``--host``/``--port`` and runs the app until interrupted: on a cluster
it starts itself, with one replica, the replica listens there itself (Serve's
direct ingress, no proxy hop; ``--proxy`` turns it off), else Serve's HTTP proxy
does; the app routes to the context actors of ``--store`` by name,
starting an actor for a context the store holds and no actor serves yet.

Safe by default (:func:`servers.binding.check_bind`): it listens on loopback
unless told otherwise and refuses another address unless ``--enforce``
(every context, existing ones included, served with capabilities enforced,
each request's token verified at the edge) or ``--insecure`` (warned about at
start). It answers only requests whose ``Host`` (and ``Origin``) name
loopback, ``--host`` or an ``--allow-host`` (:mod:`servers.edge`). Ray and
the server libraries are imported only when it runs.
"""

from __future__ import annotations

import os
import signal

import click

from morphz.cli.console import Env, run_command

__all__ = ["APP_NAME", "Terminated", "serve_cmd"]

APP_NAME = "morphz"
"""The Serve application's name on the cluster."""


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--address", default=None, help="Ray address (default: RAY_ADDRESS, else local).")
@click.option("--namespace", default=None, help="Ray namespace of the context actors.")
@click.option(
    "--enforce",
    is_flag=True,
    help="Serve contexts with capabilities enforced (Authorization: Bearer <token>).",
)
@click.option("--tenant", default=None, help="Tenant of the contexts created (with --enforce).")
@click.option("--project", default=None, help="Project of the contexts created.")
@click.option(
    "--insecure",
    is_flag=True,
    help="Listen on a non-loopback address without enforcement (warned about).",
)
@click.option("--replicas", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option(
    "--proxy",
    is_flag=True,
    help="Route requests through Serve's HTTP proxy even where the replica could listen on"
    " --port itself (see docs/http.md, direct ingress).",
)
@click.option(
    "--access-log",
    is_flag=True,
    help="Write Serve's line per request to the replica's log (off: refusals are audited at"
    " the edge and by the contexts, commits are in the store; see docs/http.md).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another host name clients reach this server by (Host and Origin are checked;"
    " loopback names and --host are always allowed).",
)
@click.pass_obj
@run_command
def serve_cmd(
    env: Env,
    host: str,
    port: int,
    address: str | None,
    namespace: str | None,
    enforce: bool,
    tenant: str | None,
    project: str | None,
    insecure: bool,
    replicas: int,
    proxy: bool,
    access_log: bool,
    allow_hosts: tuple[str, ...],
) -> None:
    """Serve the HTTP API (OpenAPI at /docs) over the store's context actors."""
    from protocol.errors import RequestError
    from servers.binding import check_bind

    for warning in check_bind(host, enforce, insecure):
        click.echo(f"morphz: warning: {warning}", err=True)
    if enforce and tenant is None:
        raise RequestError("--enforce needs --tenant (the contexts' tenant)", code="bad_argument")

    from actors.client.joining import init_ray
    from actors.client.names import DEFAULT_NAMESPACE
    from actors.client.nodes import current_node_id
    from servers.http_api import serve_app

    direct = _direct_ingress(address, replicas, port, proxy)
    started = init_ray(address)
    import ray
    from ray import serve

    # SIGTERM stops it cleanly (exit 0): the app is deleted and a cluster started here stops.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        # with direct ingress the replica listens on --port; Serve's proxy still starts, on
        # a free port of the same host, and is not used
        serve.start(http_options={"host": host, "port": _free_port(host) if direct else port})
        app = serve_app(
            env.store,
            namespace=namespace or DEFAULT_NAMESPACE,
            node_id=current_node_id(),
            enforce=enforce,
            tenant=tenant,
            project=project,
            replicas=replicas,
            hosts=(host, *allow_hosts),
            access_log=access_log,
        )
        serve.run(app, blocking=False, name=APP_NAME, route_prefix="/")
        _wait_until_answering(host, port)
        click.echo(
            f"morphz: serving {env.store} on http://{host}:{port}/v1 (docs at /docs)", err=True
        )
        while True:
            signal.pause()
    except Terminated:
        click.echo("morphz: stopped (SIGTERM)", err=True)
    finally:
        serve.delete(APP_NAME)
        if started:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()


def _direct_ingress(address: str | None, replicas: int, port: int, proxy: bool) -> bool:
    """Whether the replica itself listens on *port* (Serve's direct ingress), set up here.

    Only on a cluster this command starts (Serve reads the setting when its processes
    start), with one replica (one port) and a port given: then the request skips Serve's
    proxy, about half of an HTTP request's CPU (docs/http.md). ``--proxy`` keeps the proxy.
    On stopping, the replica finishes the requests it holds and stops at once: no balancer
    in front needs Serve's default 30 s to take it out (:data:`DRAIN_SECONDS`).
    """
    if proxy or replicas != 1 or port == 0 or address or os.environ.get("RAY_ADDRESS"):
        return False
    os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "1"
    os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"] = str(port)
    os.environ["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"] = str(port + 1)
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", DRAIN_SECONDS)
    return True


DRAIN_SECONDS = "0"
"""How long a stopping direct-ingress replica stays open beyond its last request (Serve's
``RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S``, 30 s by default, for a balancer in
front to take it out; the environment's value wins)."""


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


READY_WAIT = 120.0
"""Seconds ``serve`` waits for its first answer before it says where it serves."""


def _wait_until_answering(host: str, port: int) -> None:
    """Return once ``GET /v1/contexts`` answers on *host*:*port* (any HTTP status), so the
    address is printed only when a client can use it; TransportError after READY_WAIT."""
    import time
    import urllib.error
    import urllib.request

    from protocol.errors import TransportError

    probe = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    url = (
        f"http://[{probe}]:{port}/v1/contexts"
        if ":" in probe
        else f"http://{probe}:{port}/v1/contexts"
    )
    deadline = time.monotonic() + READY_WAIT
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError as e:
            if time.monotonic() > deadline:
                raise TransportError(
                    f"the HTTP API did not answer on {url} within {READY_WAIT:.0f} s: {e}",
                    code="not_ready",
                ) from e
            time.sleep(0.1)


class Terminated(Exception):
    """SIGTERM: stop serving and exit 0 (Ctrl-C stays 130, interrupted)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated
