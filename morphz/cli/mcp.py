"""``morphz mcp``: serve one context's memory to MCP clients (stdio, or streamable HTTP).

Register with ``cli.add_command(mcp_cmd)``. Over stdio (the default) the MCP
messages own stdout, so everything this command says goes to stderr. With
``--http HOST:PORT`` it serves streamable HTTP at ``http://HOST:PORT/mcp``,
on loopback unless the context's actor enforces capabilities or ``--insecure``
is given (:func:`servers.binding.check_bind`). Over an enforcing actor, HTTP
clients authenticate: each sends its own capability as a bearer token, which
the server verifies and forwards with each of its calls (the server holds no
token of its own: ``--capability`` is for stdio). ``Host`` and ``Origin`` are
checked against loopback, the bound address and ``--allow-host``. The store is reached as
:func:`servers.mcp_server.open_memory` says: embedded, or through the context
actor that holds it (``--address`` / ``RAY_ADDRESS``). The MCP SDK and Ray
are imported only when the command runs. See ``docs/mcp.md``.
"""

from __future__ import annotations

from typing import Any

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
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another host name HTTP clients reach this server by (Host and Origin are checked).",
)
@click.pass_obj
@run_command
def mcp_cmd(
    env: Env,
    http: str | None,
    address: str | None,
    capability: str | None,
    insecure: bool,
    create: bool,
    allow_hosts: tuple[str, ...],
) -> None:
    """Serve the context to MCP clients: tools, the protocol prompt, frame/event resources."""
    from protocol.errors import MorphzError, RequestError
    from servers.binding import check_bind, is_loopback, parse_host_port
    from servers.mcp_server import build_server, open_memory, read_capability
    from servers.stdio_refusal import refuse_stdio_session

    token = read_capability(capability)
    bind = parse_host_port(http) if http is not None else None
    if bind is not None:
        if token is not None:
            raise RequestError(
                "--capability is the token of a stdio server; over --http every client sends"
                " its own ('Authorization: Bearer <token>'), verified by this server",
                code="bad_argument",
            )
        check_bind(bind[0], True, insecure)  # the host's form, before anything is opened
        if not (
            is_loopback(bind[0]) or insecure or _actor_possible(env.store, env.context, address)
        ):
            check_bind(bind[0], False, insecure)  # refused before the store is touched
    try:
        memory = open_memory(
            env.store, env.context, address=address, capability=token, create=create
        )
    except MorphzError as e:
        if bind is None:  # a stdio host would see only "connection closed": tell it why
            refuse_stdio_session(e)
        raise
    try:
        warnings: list[str] = []
        verifier = None
        if bind is not None:
            # Enforcement is what the actor says it does, never what a token claims.
            warnings = check_bind(bind[0], memory.enforce, insecure)
            if memory.enforce:
                verifier = _verifier(env.store, memory)
        url = None if bind is None else _url(*bind)
        server = build_server(memory, verifier=verifier, url=url)
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
            server.run(
                "streamable-http",
                host=bind[0],
                port=bind[1],
                transport_security=_transport_security(bind[0], allow_hosts),
            )
    finally:
        memory.close()


def _actor_possible(store: str, context: str, address: str | None) -> bool:
    """Whether the context may be served through an actor (which may enforce)."""
    import os

    from actors.client.lookup import advertised

    return bool(address or os.environ.get("RAY_ADDRESS") or advertised(store, context))


def _url(host: str, port: int) -> str:
    name = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    return f"http://[{name}]:{port}/mcp" if ":" in name else f"http://{name}:{port}/mcp"


def _verifier(store: str, memory: Any) -> Any:
    """The bearer-token verifier of *memory*'s context: the store's public keys and
    revocations, the actor's tenant (servers.mcp_auth.CapabilityVerifier)."""
    from actors.server.guard import Guard
    from servers.mcp_auth import CapabilityVerifier

    tenant = str(memory.tenant)
    guard = Guard(store, memory.context, tenant=tenant, project="", enforce=True)
    return CapabilityVerifier(guard.verify, tenant, memory.context)


def _transport_security(host: str, allow_hosts: tuple[str, ...]) -> Any:
    """The SDK's DNS-rebinding protection: Host and Origin must name loopback, *host* (when
    it is an address, not a wildcard) or one of *allow_hosts*."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = ["127.0.0.1", "localhost", "[::1]"]
    for name in (host, *allow_hosts):
        name = name.strip().lower()
        if name and name not in ("0.0.0.0", "::", "[::]"):
            names.append(f"[{name.strip('[]')}]" if ":" in name.strip("[]") else name)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names] + names,
        allowed_origins=[f"{scheme}://{n}:*" for n in names for scheme in ("http", "https")]
        + [f"{scheme}://{n}" for n in names for scheme in ("http", "https")],
    )
