"""``morphz grant``: tokens signed where the signing key lives, verified with the public key
the store holds, revocable by id (in process, real files). On main before this change tokens
were HMAC'd with a key every actor (and every Ray worker beside it) held."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors.server.guard import grant_public_keys, revoked_tokens
from morphz.cli import cli as morphz_cli
from protocol import capabilities
from protocol.capabilities import PermissionDenied


def test_issue_verify_and_revoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORPHZ_GRANT_SIGNING_KEY_FILE", str(tmp_path / "admin" / "signing.key"))
    store, out = tmp_path / "store", tmp_path / "agent.token"
    args = ["--store", str(store), "--json", "grant"]
    done = CliRunner().invoke(
        morphz_cli,
        [*args, "issue", "--holder", "agent-7", "--tenant", "acme", "--allow", "crm-*:read,commit",
         "--ttl", "600", "--out", str(out)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and doc["token"] is None
    cap = capabilities.verify(out.read_bytes(), grant_public_keys(store), now=time.time())
    assert cap.holder == "agent-7" and capabilities.allows(cap, "acme", "crm-1", "commit")
    assert doc["expires"] == pytest.approx(time.time() + 600, abs=60)
    assert not (store / "signing.key").exists()  # the store holds the public key only
    assert CliRunner().invoke(morphz_cli, [*args, "revoke", doc["token_id"]]).exit_code == 0
    with pytest.raises(PermissionDenied, match="revoked"):
        capabilities.verify(
            out.read_bytes(), grant_public_keys(store), now=time.time(),
            revoked=revoked_tokens(store),
        )  # fmt: skip
    bad = CliRunner().invoke(morphz_cli, [*args, "issue", "--holder", "h", "--tenant", "t",
                                          "--allow", "no-ops"])  # fmt: skip
    assert bad.exit_code != 0
    key = CliRunner().invoke(morphz_cli, [*args, "public-key"])
    assert json.loads(key.output)["kid"] == cap.kid
