"""The user's facade: ``import morphz`` gives the embedded and the Ray API, their errors
and their replies, without importing Ray (or the actor layer) until a name needs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import morphz


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_morphz_imports_neither_ray_nor_the_actor_layer() -> None:
    loaded = _fresh(
        "import sys, morphz; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'actors')))"
    )
    assert loaded == "[]"


def test_the_ray_names_load_on_first_use_still_without_ray() -> None:
    loaded = _fresh(
        "import sys, morphz; "
        "names = (morphz.connect, morphz.lookup, morphz.place, morphz.ContextHandle); "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    assert loaded == "[]"


def test_the_facade_names_are_the_layers_own() -> None:
    from actors.client.handle import ContextHandle
    from actors.client.lookup import lookup
    from actors.cluster.placing import place
    from actors.server.connect import connect
    from protocol.capabilities import PermissionDenied
    from protocol.errors import TransportError

    assert morphz.connect is connect and morphz.lookup is lookup and morphz.place is place
    assert morphz.ContextHandle is ContextHandle
    assert morphz.TransportError is TransportError and issubclass(TransportError, morphz.StoreError)
    assert morphz.PermissionDenied is PermissionDenied
    with pytest.raises(AttributeError):
        morphz.not_a_name  # noqa: B018


def test_claim_answers_the_exported_reply_model(tmp_path: Path) -> None:
    ctx = morphz.open_context(tmp_path, "default")
    try:
        ctx.observe("tool_result", "x")
        claimed = ctx.claim()
        assert isinstance(claimed, morphz.ClaimReply) and claimed.claimed
    finally:
        ctx.close()
    assert not hasattr(morphz, "ClaimResult")  # the engine's internal result is not exported


def test_place_still_takes_replicas_and_says_it_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="followers"):
        with pytest.raises(morphz.RequestError) as e:
            morphz.place("x", replicas=-1)  # refused before any Ray call
    assert e.value.code == "bad_argument" and "followers" in e.value.message


def test_loadtest_says_followers_and_keeps_replicas_as_a_hidden_alias() -> None:
    from click.testing import CliRunner

    from morphz.cli import cli

    runner = CliRunner()
    shown = runner.invoke(cli, ["loadtest", "--help"])
    assert shown.exit_code == 0 and "--followers" in shown.output
    assert "--replicas" not in shown.output
    args = ["loadtest", "--threads", "1", "--contexts", "1", "--replicas", "1"]
    old = runner.invoke(cli, args)  # neither --duration nor --transactions: refused
    assert old.exit_code == 2 and "--replicas is deprecated, use --followers" in old.output
