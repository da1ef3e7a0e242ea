"""The operation registry (service/operations.py): the docs table is made from it, each
declaration is complete, and the one argument check answers typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import OutOfRange, RequestError
from service import apidoc
from service.context import Context
from service.operations import Operations, operations
from service.registry import OPERATIONS, Route
from service.store import open_context


def test_docs_api_md_is_the_table_the_registry_makes() -> None:
    text = apidoc.DOC.read_text(encoding="utf-8")
    assert apidoc.rewrite(text) == text, "docs/api.md is stale: run python -m service.apidoc"
    for op in operations():
        assert f"`{apidoc.signature(op)}`" in text


def test_the_check_fails_on_a_stale_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "api.md"
    stale.write_text(f"intro\n{apidoc.BEGIN}\n| old |\n{apidoc.END}\nrest\n", encoding="utf-8")
    monkeypatch.setattr(apidoc, "DOC", stale)
    assert apidoc.main(["--check"]) == 1
    assert apidoc.main([]) == 0
    assert apidoc.main(["--check"]) == 0
    fixed = stale.read_text(encoding="utf-8")
    assert fixed.startswith("intro\n") and fixed.endswith("\nrest\n") and "| old |" not in fixed


def test_every_declaration_is_complete() -> None:
    assert list(OPERATIONS) == [op.name for op in operations()]
    for op in operations():
        assert getattr(Operations, op.name) is op
        assert op.doc and op.permission in ("read", "commit", "recall", "admin")
        assert op.reply is not None, op.name
        assert op.example is not None, f"{op.name} declares no example call"
        config = op.args.model_config
        assert config.get("frozen") and config.get("extra") == "forbid", op.name
        assert list(op.args.model_fields) == list(op.names)
        if op.http is not None:
            assert isinstance(op.http, Route) and op.http.path.startswith("/")
            assert set(op.path_names()) <= set(op.names), op.name
        if not op.writes:
            assert op.permission != "commit", op.name


def test_the_one_argument_check(tmp_path: Path) -> None:
    ctx: Context = open_context(tmp_path, "c", sync=False)
    try:
        ref = ctx.observe("tool_result", "hello")["ref"]
        cases = [
            (lambda: ctx.read_event(ref, -1), OutOfRange, "out_of_range"),
            (lambda: ctx.read_event(ref, 0, (1 << 20) + 1), OutOfRange, "out_of_range"),
            (lambda: ctx.read_event(ref, "0"), RequestError, "bad_argument"),
            (lambda: ctx.read_event(ref, True), RequestError, "bad_argument"),
            (lambda: ctx.snapshot(["f"] * 5000), OutOfRange, "out_of_range"),
            (lambda: ctx.snapshot("abc"), RequestError, "bad_argument"),
            (lambda: ctx.frame_at("f", -1), OutOfRange, "out_of_range"),
            (lambda: ctx.frame(None), RequestError, "bad_argument"),
            (lambda: ctx.frame("a", "b"), RequestError, "bad_argument"),
            (lambda: ctx.frame(frame="a"), RequestError, "bad_argument"),
            (lambda: ctx.audit(0, 0), OutOfRange, "out_of_range"),
            (lambda: ctx.traces(after=-1), OutOfRange, "out_of_range"),
        ]
        before = ctx.state()
        for call, kind, code in cases:
            with pytest.raises(kind) as info:
                call()
            assert info.value.code == code
        assert ctx.state() == before
        # A tuple is a sequence as a list is; the reply is the same.
        assert ctx.snapshot(("a", "b")) == ctx.snapshot(["a", "b"])
        assert ctx.read_event(ref, 1, 3).text == "ell"
    finally:
        ctx.close()
