"""Where a network server may listen: the safe-by-default binding rule of every server port.

A server binds to loopback unless told otherwise, and refuses any other
address unless capabilities are enforced (every call it makes is checked
against a token) — or the operator passes an explicit ``--insecure``, which
it warns about at start. ``morphz mcp --http`` and ``morphz serve`` both call
:func:`check_bind` before they listen, so the rule is written once.

Loopback means an IP address in ``127.0.0.0/8`` or ``::1``, or the name
``localhost``. Any other name counts as non-loopback: the check does no DNS
lookup, so a name that happens to resolve to loopback is treated as public
(the safe side).
"""

from __future__ import annotations

import ipaddress

from protocol.errors import RequestError

__all__ = ["DEFAULT_HOST", "check_bind", "is_loopback", "parse_host_port"]

DEFAULT_HOST = "127.0.0.1"
"""The address a server listens on when none is given."""

MAX_HOST_CHARS = 253
"""The longest host name accepted (the DNS limit)."""


def is_loopback(host: str) -> bool:
    """True if *host* is a loopback IP address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: object, enforced: bool, insecure: bool) -> list[str]:
    """Check that a server may listen on *host*; the warnings to print at start.

    Loopback: allowed, no warning. Another address: allowed with no warning
    when capabilities are *enforced*; allowed with a warning when *insecure*
    says so explicitly; refused otherwise with :class:`RequestError` code
    ``insecure_bind`` (nothing is started). A host that is not a non-empty
    string of at most :data:`MAX_HOST_CHARS` characters is ``bad_argument``.
    """
    if not isinstance(host, str) or not host.strip() or len(host) > MAX_HOST_CHARS:
        raise RequestError(
            f"a host to listen on is a non-empty name or address of at most {MAX_HOST_CHARS}"
            f" characters, not {host!r:.80}",
            code="bad_argument",
        )
    if any(c.isspace() or c in "/?#@" for c in host.strip()):
        raise RequestError(f"not a host name or address: {host!r:.80}", code="bad_argument")
    if is_loopback(host):
        return []
    if enforced:
        return []
    if insecure:
        return [
            f"listening on {host}, which is not a loopback address, with capabilities NOT"
            " enforced (--insecure): anyone who can reach this port can read and write the"
            " memory"
        ]
    raise RequestError(
        f"refusing to listen on {host}: it is not a loopback address and capabilities are not"
        " enforced; enforce capabilities, listen on 127.0.0.1, or pass --insecure to accept"
        " the risk",
        code="insecure_bind",
    )


def parse_host_port(value: object, *, default_host: str = DEFAULT_HOST) -> tuple[str, int]:
    """``(host, port)`` from ``HOST:PORT``, ``:PORT``, ``PORT`` or ``[V6]:PORT``.

    The port must be 0 to 65535 (0: any free port). Malformed text is a
    :class:`RequestError` ``bad_argument``.
    """
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_HOST_CHARS + 8:
        raise RequestError(f"expected HOST:PORT, not {value!r:.80}", code="bad_argument")
    text = value.strip()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise RequestError(f"expected [IPV6]:PORT, not {text!r:.80}", code="bad_argument")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    else:
        host, port_text = "", text
    host = host or default_host
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise RequestError(
            f"a port is a number from 0 to 65535, not {port_text!r:.20}", code="bad_argument"
        )
    return host, int(port_text)
