"""``morphz inspect``: the web inspector over a store, read-only, in this process.

It opens the store's contexts read-only (no writer lock: a running writer or context
actor is unaffected) and serves the inspector's pages (:mod:`servers.inspector`) with
uvicorn at ``http://HOST:PORT/inspect/``. It listens on loopback by default; another
address needs ``--insecure`` (the pages show every memory of the store to whoever
reaches them, with no capability check). No Ray.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import click

from morphz.cli.console import Env, run_command

__all__ = ["inspect_app", "inspect_cmd"]

PREFIX = "/inspect"


def inspect_app(store: str) -> object:
    """The ASGI app ``morphz inspect`` serves: the inspector of *store* under ``/inspect``."""
    from fastapi import FastAPI
    from fastapi.responses import RedirectResponse

    from servers.http_api import error_status
    from servers.inspector import StoreSource, create_inspector

    source = StoreSource(store)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        source.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.mount(PREFIX, create_inspector(source, error_status=error_status))

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(PREFIX + "/", 307)

    return app


@click.command("inspect")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8377, show_default=True)
@click.option(
    "--insecure",
    is_flag=True,
    help="Listen on a non-loopback address (anyone reaching it reads every context).",
)
@click.pass_obj
@run_command
def inspect_cmd(env: Env, host: str, port: int, insecure: bool) -> None:
    """Browse the store's contexts in a web browser (read-only, loopback by default)."""
    import uvicorn

    from servers.binding import check_bind

    # The inspector checks no capability: another address than loopback needs --insecure.
    for warning in check_bind(host, False, insecure):
        click.echo(f"morphz: warning: {warning}", err=True)
    click.echo(f"morphz: inspecting {env.store} on http://{host}:{port}{PREFIX}/", err=True)
    uvicorn.run(inspect_app(env.store), host=host, port=port, log_level="warning")  # type: ignore[arg-type]
