"""Capabilities (pure), scopes, and tenant isolation of enforcing context actors on Ray."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from actors.server.guard import (
    OPERATION_OF,
    export_frame,
    grant_key,
    grant_public_keys,
    import_frame,
    issue_capability,
    package_key,
    revoke_token,
    settle_scope,
)
from protocol import capabilities as grants
from protocol.capabilities import Capability, PermissionDenied
from protocol.errors import NotFound, RequestError
from protocol.wire import pack, unpack
from tests.actors.cluster import RayCluster

KEY = b"k" * 32
PUB = grants.public_key(KEY)
"""What actors hold: the public half of the signing key KEY."""
NOW = 1_700_000_000.0
"""The clock of the pure capability checks (tokens here never expire unless a test says so)."""


def cap_for(tenant: str = "acme", grants_: Any = (("payroll-*", ("read",)),), **kw: Any) -> bytes:
    kw.setdefault("now", NOW)
    return grants.issue(KEY, holder="t1", tenant=tenant, grants=grants_, issued_by="ops", **kw)


# -- pure capabilities ------------------------------------------------------------


def test_issue_verify_allows() -> None:
    cap = grants.verify(
        cap_for(grants_=[("payroll-*", ["read", "recall"]), ("crm", ["commit"])]), PUB, now=NOW
    )
    assert cap.holder == "t1" and cap.tenant == "acme" and cap.issued_by == "ops"
    assert grants.allows(cap, "acme", "payroll-2026", "read")
    assert grants.allows(cap, "acme", "payroll-2026", "recall")
    assert not grants.allows(cap, "acme", "payroll-2026", "commit")
    assert grants.allows(cap, "acme", "crm", "commit")
    assert not grants.allows(cap, "acme", "crm-old", "commit")  # a plain name is exact
    assert not grants.allows(cap, "globex", "payroll-2026", "read")  # another tenant
    admin = grants.verify(cap_for(grants_=[("*", ["admin"])]), PUB, now=NOW)
    assert not grants.allows(admin, "acme", "x", "read")  # admin implies nothing else


@pytest.mark.parametrize(
    "tamper",
    [
        "flip_byte",
        "truncate",
        "widen_grants",
        "other_tenant",
        "other_key",
        "garbage",
        "not_bytes",
        "unsigned",
    ],
)
def test_tampered_tokens_are_refused(tamper: str) -> None:
    token = cap_for()
    doc = unpack(token)
    if tamper == "flip_byte":
        bad: Any = token[:-3] + bytes([token[-3] ^ 1]) + token[-2:]
    elif tamper == "truncate":
        bad = token[:-5]
    elif tamper == "widen_grants":
        doc["grants"] = [{"context": "*", "ops": ["read", "commit", "recall", "admin"]}]
        bad = pack(doc)
    elif tamper == "other_tenant":
        doc["tenant"] = "globex"
        bad = pack(doc)
    elif tamper == "other_key":
        bad = grants.issue(
            b"z" * 32, holder="t1", tenant="acme", grants=[("*", ["read"])], issued_by="x", now=NOW
        )
    elif tamper == "garbage":
        bad = os.urandom(64)
    elif tamper == "not_bytes":
        bad = "token"
    else:
        doc["signature"] = ""
        bad = pack(doc)
    with pytest.raises(PermissionDenied) as e:
        grants.verify(bad, PUB, now=NOW)
    assert e.value.code == "permission_denied" and isinstance(e.value, RequestError)


def test_expiry_and_bad_grants() -> None:
    token = cap_for(expires=1000.0, now=900.0)
    assert grants.verify(token, PUB, now=999.0).expires == 1000.0
    with pytest.raises(PermissionDenied, match="expired"):
        grants.verify(token, PUB, now=1000.0)
    with pytest.raises(RequestError):
        cap_for(grants_=[("x", ["write"])])  # not an operation
    with pytest.raises(RequestError):
        grants.issue(b"short", holder="t", tenant="a", grants=[], issued_by="x", now=NOW)


def test_signature_covers_every_field() -> None:
    cap = grants.decode(cap_for())
    for field, value in [
        ("holder", "t2"),
        ("issued_by", "me"),
        ("expires", 1e12),
        ("issued_at", 0.0),
        ("audience", "acme/other"),
        ("token_id", "t2"),
    ]:
        forged = cap.model_copy(update={field: value})
        with pytest.raises(PermissionDenied):
            grants.verify(grants.token(forged), PUB, now=NOW)
    assert isinstance(cap, Capability)


def test_sealed_packages() -> None:
    sealed = grants.seal({"frame": "x", "body_forms": [["a", 1]]}, KEY)
    assert grants.unseal(sealed, KEY) == {"frame": "x", "body_forms": [["a", 1]]}
    outer = unpack(sealed)
    outer["body"] = pack({"frame": "y", "body_forms": []})
    for bad in (pack(outer), sealed[:-1], b"", grants.seal({"a": 1}, b"q" * 32)):
        with pytest.raises(PermissionDenied):
            grants.unseal(bad, KEY)


def test_every_store_method_is_classified() -> None:
    assert OPERATION_OF["frame"] == "read" and OPERATION_OF["submit"] == "commit"
    assert OPERATION_OF["recall_observation"] == "recall" and OPERATION_OF["export"] == "admin"
    # follower_denials takes no capability: a member's MAC under the replication key;
    # process_state tells what /proc tells any local user (the supervisor asks it)
    public = {"handshake", "pid", "node_id", "replicate", "follower_denials", "process_state"}
    methods = {
        n for n in dir(ContextActor) if not n.startswith("_") and callable(getattr(ContextActor, n))
    }
    assert methods - public == set(OPERATION_OF)


# -- scopes and the key (files, no Ray) ------------------------------------------


def test_scope_is_stored_and_mismatches_refused(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    assert settle_scope(tmp_path, "c", "acme", "payroll", False) == {
        "tenant": "acme",
        "project": "payroll",
        "enforce": False,
    }
    assert settle_scope(tmp_path, "c", None, None, True)["enforce"] is True  # tightened
    assert settle_scope(tmp_path, "c", "acme", None, False)["enforce"] is True  # sticky
    assert json.loads((tmp_path / "c" / "scope.json").read_text())["tenant"] == "acme"
    for tenant, project in (("globex", None), (None, "crm")):
        with pytest.raises(RequestError) as e:
            settle_scope(tmp_path, "c", tenant, project, False)
        assert e.value.code == "scope_mismatch"


def test_signing_key_stays_off_the_store_and_only_public_keys_go_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MORPHZ_GRANT_SIGNING_KEY_FILE", str(tmp_path / "issuer" / "signing.key"))
    store = tmp_path / "store"
    seed = grant_key(store)
    assert seed == grant_key(store) and len(seed) == 32
    assert stat.S_IMODE((tmp_path / "issuer" / "signing.key").stat().st_mode) == 0o600
    published = (store / ".grant-public-keys").read_text().split()
    assert published == [grants.public_key(seed).hex()]  # once, however often issued
    assert seed.hex() not in "".join(p.read_text() for p in store.iterdir() if p.is_file())
    assert grant_public_keys(store) == {
        grants.key_id(grants.public_key(seed)): grants.public_key(seed)
    }
    monkeypatch.delenv("MORPHZ_PACKAGE_KEY", raising=False)
    assert len(package_key(store)) == 64
    assert stat.S_IMODE((store / ".package-key").stat().st_mode) == 0o600
    monkeypatch.setenv("MORPHZ_PACKAGE_KEY", "s" * 20)
    assert package_key(store) == b"s" * 20


def test_a_holder_of_the_public_key_cannot_mint_and_old_hmac_tokens_are_refused() -> None:
    import hashlib
    import hmac

    # What a Ray worker can read on a node: the public key. Signing with it as a seed
    # (or any other key) yields a token that does not verify.
    forged = grants.issue(
        PUB, holder="w", tenant="acme", grants=[("*", ["admin"])], issued_by="worker", now=NOW
    )
    with pytest.raises(PermissionDenied, match="unknown key|does not verify"):
        grants.verify(forged, PUB, now=NOW)
    doc = {
        "holder": "w",
        "tenant": "acme",
        "grants": [{"context": "*", "ops": ["admin"]}],
        "issued_by": "x",
        "issued_at": NOW,
        "expires": None,
    }
    text = "morphz-cap/1\n" + json.dumps(doc, sort_keys=True, separators=(",", ":"))
    doc["signature"] = hmac.new(b"s" * 32, text.encode(), hashlib.sha256).hexdigest()
    with pytest.raises(PermissionDenied, match="retired shared-key scheme.*morphz grant"):
        grants.verify(pack(doc), PUB, now=NOW)


def test_tokens_expire_by_default_name_an_audience_and_can_be_revoked() -> None:
    cap = grants.verify(cap_for(), PUB, now=NOW)
    assert cap.expires == NOW + grants.DEFAULT_TTL and cap.audience == "acme" and cap.token_id
    with pytest.raises(PermissionDenied, match="expired"):
        grants.verify(cap_for(), PUB, now=NOW + grants.DEFAULT_TTL)
    assert grants.verify(cap_for(ttl=None), PUB, now=NOW + 1e9).expires is None  # on purpose
    narrow = grants.verify(
        cap_for(grants_=[("*", ["read"])], audience="acme/payroll-1"), PUB, now=NOW
    )
    assert grants.allows(narrow, "acme", "payroll-1", "read")
    assert not grants.allows(narrow, "acme", "payroll-2", "read")  # another audience
    with pytest.raises(RequestError):
        cap_for(audience="globex")
    with pytest.raises(PermissionDenied, match="revoked"):
        grants.verify(cap_for(), PUB, now=NOW, revoked={cap.token_id})


def test_a_revoked_token_is_refused_by_a_running_guard(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-v", tenant="acme", enforce=True)
    token = issue_capability(tmp_path, holder="w", tenant="acme", grants=[("*", ["read"])])
    admin = issue_capability(tmp_path, holder="ops", tenant="acme", grants=[("*", ["admin"])])
    assert open_reply(asyncio.run(actor.version(capability=token))) == 0
    revoke_token(tmp_path, grants.decode(token).token_id)
    with pytest.raises(PermissionDenied, match="revoked"):
        open_reply(asyncio.run(actor.version(capability=token)))  # cached, yet refused
    actor.close(capability=admin)


def test_plain_actor_denies_audits_and_changes_nothing(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "acme-a", tenant="acme", project="p", enforce=True)
    key = grant_key(tmp_path)
    good = grants.issue(
        key,
        holder="w",
        tenant="acme",
        grants=[("acme-*", ["read", "commit", "admin"])],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    reader = grants.issue(
        key,
        holder="r",
        tenant="acme",
        grants=[("acme-a", ["read"])],
        issued_by="ops",
        now=NOW,
        ttl=None,
    )

    async def run() -> None:
        assert open_reply(await actor.version(capability=good)) == 0
        with pytest.raises(PermissionDenied):
            open_reply(await actor.version())
        with pytest.raises(PermissionDenied):
            open_reply(await actor.observe("user_message", "hi", capability=reader))
        with pytest.raises(PermissionDenied):
            await actor.stats(capability=reader)
        assert open_reply(await actor.state(capability=reader))["events"] == []
        audit = open_reply(await actor.audit(capability=good))
        assert [(a["method"], a["holder"], a["allowed"]) for a in audit] == [
            ("version", None, False),
            ("observe", "r", False),
            ("stats", "r", False),
        ]
        assert (await actor.describe(capability=good))["denials"] == 3

    try:
        asyncio.run(run())
    finally:
        actor.close(capability=good)


# -- tenant isolation on Ray --------------------------------------------------------


@pytest.mark.ray
def test_a_thread_of_tenant_a_cannot_reach_tenant_b(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import connect

    key = grant_key(tmp_path)  # the key file every actor of this store directory reads
    mine = grants.issue(
        key,
        holder="thief",
        tenant="acme",
        grants=[("acme-*", grants.OPERATIONS)],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    b_owner = grants.issue(
        key,
        holder="owner",
        tenant="globex",
        grants=[("globex-*", grants.OPERATIONS)],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    a = connect(
        "acme-a",
        store_dir=tmp_path,
        namespace=namespace,
        tenant="acme",
        project="payroll",
        enforce=True,
        capability=mine,
    )
    b = connect(
        "globex-b",
        store_dir=tmp_path,
        namespace=namespace,
        tenant="globex",
        project="crm",
        enforce=True,
        capability=b_owner,
    )
    try:
        e1 = b.observe("tool_result", "secret: globex margin is 41%")
        b.claim()
        assert b.submit(
            f"(context-tx (base-version {b.version()}) (derive secret (from {e1['ref']}) (margin 41)))"
        ).committed
        before = b.state()

        # a handle for B carrying A's token, no token, forged tokens, a foreign key
        forged_doc = unpack(mine)
        forged_doc.update(
            tenant="globex", grants=[{"context": "*", "ops": list(grants.OPERATIONS)}]
        )
        tokens: dict[str, Any] = {
            "a-token": mine,
            "none": None,
            "forged": pack(forged_doc),
            "flipped": mine[:-2] + bytes([mine[-2] ^ 1]) + mine[-1:],
            "foreign-key": grants.issue(
                b"x" * 32,
                holder="thief",
                tenant="globex",
                grants=[("*", grants.OPERATIONS)],
                issued_by="thief",
                now=NOW,
                ttl=None,  # checked by actors at the real time
            ),
        }
        attempts = {
            "frame": lambda h: h.frame("secret"),
            "state": lambda h: h.state(),
            "snapshot": lambda h: h.snapshot(["secret"]),
            "history": lambda h: h.history("secret"),
            "read_event": lambda h: h.read_event(e1["ref"]),
            "submit": lambda h: h.submit("(context-tx (base-version 0) (derive stolen (x)))"),
            "observe": lambda h: h.observe("user_message", "leak it"),
            "claim": lambda h: h.claim(),
            "recall": lambda h: h.recall_observation({"frame_id": "secret"}),
            "search": lambda h: h.search({"query": "secret"}),
            "pending": lambda h: h.pending(),
            "review": lambda h: h.review("secret", "reject", "thief"),
            "export": lambda h: h.export(),
            "export_frame": lambda h: export_frame(h, "secret", h.capability),
            "audit": lambda h: h.audit(),
            "stats": lambda h: h.stats(),
        }
        for label, token in tokens.items():
            thief = b.with_capability(token)
            for what, attempt in attempts.items():
                with pytest.raises(PermissionDenied):
                    attempt(thief)
                    pytest.fail(f"{label} {what} was allowed")
        # the raw actor, bypassing the handle, is refused the same way
        import ray

        with pytest.raises(PermissionDenied):
            open_reply(ray.get(b.actor.frame.remote("secret")))
        # nothing changed in B
        assert b.state() == before
        audit = b.audit()
        denied = [x for x in audit if not x["allowed"]]
        assert sum(x["count"] for x in denied) == len(tokens) * len(attempts) + 1  # coalesced
        assert {x["holder"] for x in denied} >= {"thief", None}
        assert {x["method"] for x in denied} >= {"frame", "submit", "recall_observation", "export"}

        # through sources: citing B's frame or event id from A is an unknown reference
        va = a.version()
        for cite in ("secret", e1["ref"]):  # A has no event @e1 and no frame 'secret'
            r = a.submit(f"(context-tx (base-version {va}) (derive copy (from {cite}) (x)))")
            assert r.status == "rejected" and r.errors[0].code == "unknown_ref"
        with pytest.raises(NotFound):
            a.frame("secret")
        with pytest.raises(NotFound):
            a.recall_observation({"frame_id": "secret"})
        # search reads only the caller's own context's index
        found = a.search({"query": "secret"})
        assert found["hits"] == 0 and found["recalled"] == []
        assert "globex" not in a.read_event(found["ref"])["text"]
        assert a.version() == va

        # the scope is the context's: another tenant or project is refused at connect
        with pytest.raises(RequestError) as err:
            connect("globex-b", store_dir=tmp_path, namespace=namespace, tenant="acme")
        assert err.value.code == "scope_mismatch"
        assert b.state() == before
    finally:
        a.shutdown()
        b.shutdown()


@pytest.mark.ray
def test_explicit_export_import_is_checked_and_audited(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import connect

    key = grant_key(tmp_path)
    a_owner = grants.issue(
        key,
        holder="a-owner",
        tenant="acme",
        grants=[("acme-*", grants.OPERATIONS)],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    a_reader = grants.issue(
        key,
        holder="curator",
        tenant="acme",
        grants=[("acme-src", ["read"])],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    b_admin = grants.issue(
        key,
        holder="curator",
        tenant="globex",
        grants=[("globex-dst", ["admin", "read"])],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    b_reader = grants.issue(
        key,
        holder="curator",
        tenant="globex",
        grants=[("globex-dst", ["read"])],
        issued_by="ops",
        now=NOW,
        ttl=None,  # checked by actors at the real time
    )
    a = connect(
        "acme-src",
        store_dir=tmp_path,
        namespace=namespace,
        tenant="acme",
        enforce=True,
        capability=a_owner,
    )
    b = connect(
        "globex-dst",
        store_dir=tmp_path,
        namespace=namespace,
        tenant="globex",
        enforce=True,
        capability=b_admin,
    )
    try:
        e1 = a.observe("tool_result", "deploy to cn-shanghai failed: quota")
        a.claim()
        assert a.submit(
            f"(context-tx (base-version {a.version()}) (derive lesson (from {e1['ref']}) (check quota first)))"
        ).committed
        version_a = a.version()

        with pytest.raises(PermissionDenied):
            export_frame(a, "lesson", b_admin)  # a grant of another tenant
        package = export_frame(a, "lesson", a_reader)
        with pytest.raises(PermissionDenied):
            import_frame(b, package, a_owner)  # admin on A is not admin on B
        with pytest.raises(PermissionDenied):
            import_frame(b, package, b_reader)  # read on B is not admin
        outer = unpack(package)
        outer["body"] = outer["body"].replace(b"quota", b"QUOTA")
        with pytest.raises(PermissionDenied):
            import_frame(b, pack(outer), b_admin)  # a tampered package
        assert b.version() == 0

        done = import_frame(b, package, b_admin)
        assert done["id"] == "imported/acme-src/lesson" and done["receipt"]["status"] == "committed"
        again = import_frame(b, package, b_admin)
        assert again["receipt"]["duplicate"] and b.version() == 1, (again, b.version())
        body = b.frame("imported/acme-src/lesson")["body"]
        assert body.startswith(
            '(provenance (from-tenant "acme") (from-project "default") (from-context "acme-src")'
        )
        assert f'(version {version_a}) (frame "lesson") (revision 1)' in body
        assert "deploy to cn-shanghai failed" in body and body.endswith("(check quota first)")
        assert b.frame("imported/acme-src/lesson")["sources"] == []
        assert a.version() == version_a

        exports = [x for x in a.audit() if x["method"] == "export_frame"]
        assert [(x["holder"], x["allowed"]) for x in exports] == [
            ("curator", False),
            ("curator", True),
        ]
        imports = [x for x in b.audit() if x["method"] == "import_frame"]
        assert [(x["holder"], x["allowed"]) for x in imports][-2:] == [
            ("curator", True),
            ("curator", True),
        ]
        assert sum(not x["allowed"] for x in imports) == 3
    finally:
        a.shutdown()
        b.shutdown()
