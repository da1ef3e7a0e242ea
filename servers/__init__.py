"""Network ports over the application service: the MCP server and the HTTP API.

Each server is a thin port: it checks arguments, calls :mod:`service` (embedded) or a
context actor through :mod:`actors`, and translates errors into its protocol's shape.
"""

from servers.binding import check_bind, is_loopback, parse_host_port
from servers.http_api import ActorResolver, Resolver, bearer, create_app, serve_app
from servers.mcp_server import Memory, build_server, open_memory, read_capability

__all__ = [
    "ActorResolver",
    "Memory",
    "Resolver",
    "bearer",
    "build_server",
    "check_bind",
    "create_app",
    "is_loopback",
    "open_memory",
    "parse_host_port",
    "read_capability",
    "serve_app",
]
