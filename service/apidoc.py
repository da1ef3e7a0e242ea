"""The call table of ``docs/api.md``, made from the operation registry.

``python -m service.apidoc`` rewrites the table between the markers in
``docs/api.md``; ``python -m service.apidoc --check`` exits 1 when the file
differs from what the registry says (``tests/service/test_registry.py`` runs
the same comparison). The table has one row per registered operation: its
signature (the same on the embedded context and the Ray handle), its reply,
the permission it needs, whether it writes, and where MCP and HTTP expose it.
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path
from typing import Any

from service.operations import operations
from service.registry import Operation

BEGIN = "<!-- calls: made by `python -m service.apidoc` from service/operations.py; do not edit -->"
END = "<!-- end of calls -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def type_name(tp: Any) -> str:
    """A reply or argument type as the table shows it: ``list[FrameReply]``, ``int | None``."""
    if tp is None or tp is type(None):
        return "None"
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return type_name(typing.get_args(tp)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(tp, "__name__", str(tp))


def signature(op: Operation[Any, Any]) -> str:
    """``name(arg, arg=default, …)``: the call as both ports take it."""
    parts = []
    for name, field in op.args.model_fields.items():
        parts.append(name if field.is_required() else f"{name}={field.default!r}")
    return f"{op.name}({', '.join(parts)})"


def plain_doc(text: str) -> str:
    """A docstring line as Markdown: ``x`` as `x`, Sphinx roles dropped, pipes escaped."""
    text = re.sub(r":(?:func|meth|data|class|mod):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`").replace("|", "\\|")


def row(op: Operation[Any, Any]) -> str:
    """One line of the table."""
    http = f"`{op.http.method} {op.http.path}`" if op.http is not None else "—"
    mcp = f"`{op.mcp.name or op.name}`" if op.mcp is not None else "—"
    cells = [
        f"`{signature(op)}`",
        f"`{type_name(op.reply)}`",
        op.permission,
        "yes" if op.writes else "no",
        mcp,
        http,
        plain_doc(op.doc),
    ]
    return "| " + " | ".join(cells) + " |"


def table() -> str:
    """The generated block, markers included."""
    lines = [
        BEGIN,
        "",
        "| call | reply | needs | writes | MCP tool | HTTP (under `/v1/contexts/{context}`)"
        " | what |",
        "|---|---|---|---|---|---|---|",
        *(row(op) for op in operations()),
        "",
        END,
    ]
    return "\n".join(lines)


def rewrite(text: str) -> str:
    """*text* (``docs/api.md``) with its generated block replaced by the current table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/api.md has no generated block ({BEGIN!r} … {END!r})")
    return text[:start] + table() + text[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    """Rewrite ``docs/api.md`` (or, with ``--check``, say whether it is current)."""
    args = sys.argv[1:] if argv is None else argv
    current = DOC.read_text(encoding="utf-8")
    wanted = rewrite(current)
    if "--check" in args:
        if wanted != current:
            print("docs/api.md differs from the registry: run python -m service.apidoc")
            return 1
        return 0
    if wanted != current:
        DOC.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
