"""``morphz serve``: the HTTP API (:mod:`servers.http_api`) as a Ray Serve application.

It joins Ray (``--address``, then ``RAY_ADDRESS``, else a new local cluster),
starts Serve's HTTP proxy on ``--host``/``--port`` and runs the app until
interrupted; the app routes to the context actors of ``--store`` by name,
starting an actor for a context the store holds and no actor serves yet.

Safe by default (:func:`servers.binding.check_bind`): it listens on loopback
unless told otherwise and refuses another address unless ``--enforce``
(contexts served with capabilities enforced) or ``--insecure`` (warned about
at start). Ray and the server libraries are imported only when it runs.
"""

from __future__ import annotations

import signal

import click

from morphz.cli.console import Env, run_command

__all__ = ["APP_NAME", "serve_cmd"]

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
) -> None:
    """Serve the HTTP API (OpenAPI at /docs) over the store's context actors."""
    from protocol.errors import RequestError
    from servers.binding import check_bind

    for warning in check_bind(host, enforce, insecure):
        click.echo(f"morphz: warning: {warning}", err=True)
    if enforce and tenant is None:
        raise RequestError("--enforce needs --tenant (the contexts' tenant)", code="bad_argument")

    from actors.client.names import DEFAULT_NAMESPACE
    from actors.client.nodes import current_node_id
    from actors.client.transport import init_ray
    from servers.http_api import serve_app

    started = init_ray(address)
    import ray
    from ray import serve

    # SIGTERM stops it like Ctrl-C: the app is deleted and a cluster started here stops.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        serve.start(http_options={"host": host, "port": port})
        app = serve_app(
            env.store,
            namespace=namespace or DEFAULT_NAMESPACE,
            node_id=current_node_id(),
            enforce=enforce,
            tenant=tenant,
            project=project,
            replicas=replicas,
        )
        click.echo(
            f"morphz: serving {env.store} on http://{host}:{port}/v1 (docs at /docs)", err=True
        )
        serve.run(app, blocking=True, name=APP_NAME, route_prefix="/")
    finally:
        serve.delete(APP_NAME)
        if started:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
