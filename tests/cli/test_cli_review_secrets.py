"""``morphz review scan`` finds a key in an accepted frame and in a tool result: located,
masked, the frame quarantined, ``forget`` named for the observation, all of it audited."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from morphz.cli import cli
from service.store import Store

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "IOSFODNN7EXAMPLE"


def run(store: Path, *args: str, json_out: bool = True) -> Result:
    base = ["--store", str(store), "--context", "default"] + (["--json"] if json_out else [])
    return CliRunner().invoke(cli, [*base, *args])


def leaky(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "store"
    with Store(path).open(sync=False) as ctx:
        ctx.commit(f'(context-tx (base-version 0) (derive creds (aws "{KEY}")))')
        ref = ctx.observe("tool_result", f"$ cat ~/.aws/credentials\naws_access_key_id = {KEY}").ref
    return path, ref


def test_review_scan_reports_and_audits_secrets_without_showing_them(tmp_path: Path) -> None:
    store, ref = leaky(tmp_path)
    r = run(store, "review", "scan")
    assert r.exit_code == 0, r.output
    scan = json.loads(r.output)
    assert scan["quarantined"] == ["creds"]
    by_ref = {s["ref"]: s for s in scan["sensitive"]}
    assert set(by_ref) == {"creds", ref}
    assert by_ref[ref]["record"] == "observation" and f"forget {ref}" in by_ref[ref]["remedy"]
    assert by_ref["creds"]["action"] == "quarantined" and by_ref["creds"]["field"] == "body"
    audit = run(store, "audit")
    flagged = [e for e in json.loads(audit.output)["entries"] if e["outcome"] == "flagged"]
    assert len(flagged) == 1 and flagged[0]["holder"].startswith("cli")
    assert SECRET not in r.output + audit.output


def test_review_scan_prints_each_finding_located_in_plain_text(tmp_path: Path) -> None:
    store, ref = leaky(tmp_path)
    r = run(store, "review", "scan", json_out=False)
    assert r.exit_code == 0, r.output
    assert "sensitive_content  creds: AWS access key id in body at" in r.output
    assert f"sensitive  {ref} text[" in r.output and "AKIA****" in r.output
    assert f"`forget {ref}`" in r.output and "quarantined creds at version" in r.output
    assert SECRET not in r.output
