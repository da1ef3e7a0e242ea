"""``morphz mcp``: serve one context's memory to MCP clients (stdio, or streamable HTTP).

Register with ``cli.add_command(mcp_cmd)``. Over stdio (the default) the MCP
messages own stdout, so everything this command says goes to stderr. With
``--http HOST:PORT`` it serves streamable HTTP at ``http://HOST:PORT/mcp``,
on loopback unless capabilities are enforced or ``--insecure`` is given
(:func:`servers.binding.check_bind`). The store is reached as
:func:`servers.mcp_server.open_memory` says: embedded, or through the context
actor that holds it (``--address`` / ``RAY_ADDRESS``). The MCP SDK and Ray
are imported only when the command runs. See ``docs/mcp.md``.
"""

from __future__ import annotations

import click

from morphz.cli.console import Env, run_command


@click.command("mcp")
@click.option(
    "--http",
    "http",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST default 127.0.0.1).",
)
@click.option(
    "--address",
    default=None,
    help="Ray address of the context actor to serve through (default: RAY_ADDRESS, else the"
    " actor advertised in the store, else the store embedded).",
)
@click.option(
    "--capability",
    envvar="MORPHZ_CAPABILITY",
    default=None,
    help="Capability token sent with every actor call: a file holding it, or it in base64"
    " (env MORPHZ_CAPABILITY).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow --http on a non-loopback address without capabilities (warned at start).",
)
@click.option("--create", is_flag=True, help="Create the context if it does not exist.")
@click.pass_obj
@run_command
def mcp_cmd(
    env: Env,
    http: str | None,
    address: str | None,
    capability: str | None,
    insecure: bool,
    create: bool,
) -> None:
    """Serve the context to MCP clients: tools, the protocol prompt, frame/event resources."""
    from protocol.errors import MorphzError
    from servers.binding import check_bind, parse_host_port
    from servers.mcp_server import build_server, open_memory, read_capability
    from servers.stdio_refusal import refuse_stdio_session

    token = read_capability(capability)
    bind = parse_host_port(http) if http is not None else None
    # Checked before the store is opened, so a refused bind changes nothing. A token is
    # enforced by the actor on every call (open_memory refuses one on an embedded store).
    warnings = check_bind(bind[0], token is not None, insecure) if bind is not None else []
    try:
        memory = open_memory(
            env.store, env.context, address=address, capability=token, create=create
        )
    except MorphzError as e:
        if bind is None:  # a stdio host would see only "connection closed": tell it why
            refuse_stdio_session(e)
        raise
    try:
        server = build_server(memory)
        click.echo(
            f"morphz mcp: context {env.context!r} via {memory.via}"
            + (f" on http://{bind[0]}:{bind[1]}/mcp" if bind else " on stdio"),
            err=True,
        )
        if bind is None:
            server.run("stdio")
        else:
            for w in warnings:
                click.echo(f"morphz mcp: WARNING: {w}", err=True)
            server.run("streamable-http", host=bind[0], port=bind[1])
    finally:
        memory.close()
