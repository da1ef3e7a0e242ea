"""``morphz grant``: issue, revoke and publish capability tokens (Ed25519, docs/security.md).

Run it where the grant signing key lives (``$MORPHZ_GRANT_SIGNING_KEY_FILE``, else
``~/.config/morphz/grant-signing.key``, made on first use), never on a cluster
node: ``issue`` signs a token and publishes the public key to ``--store`` (the
actors of that store verify with it), ``revoke`` lists a token id there,
``public-key`` prints the public key for ``$MORPHZ_GRANT_PUBLIC_KEYS`` on nodes
that do not share the store directory. ``directory-key`` prints the context
directory's epoch-signing public key for ``$MORPHZ_DIRECTORY_PUBLIC_KEYS``.

Register with ``cli.add_command(grant_cmd)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from morphz.cli.console import Env, emit, run_command


def _grant(text: str) -> tuple[str, list[str]]:
    glob, _, ops = text.partition(":")
    if not glob or not ops:
        raise click.BadParameter(f"{text!r}: a grant is CONTEXT_GLOB:op[,op] (read,commit,...)")
    return glob, [o for o in ops.split(",") if o]


@click.group("grant")
def grant_cmd() -> None:
    """Capability tokens: issue, revoke, print the public key."""


@grant_cmd.command("issue")
@click.option("--holder", required=True, help="Who holds the token (an agent or thread id).")
@click.option("--tenant", required=True, help="The tenant whose contexts it grants.")
@click.option("--allow", "allows", multiple=True, required=True, help="CONTEXT_GLOB:op[,op].")
@click.option("--audience", help="tenant (default) or tenant/context: who may accept it.")
@click.option("--ttl", type=float, default=24 * 3600.0, show_default=True, help="Seconds.")
@click.option("--no-expiry", is_flag=True, help="A token that never expires (say why).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Token file.")
@click.pass_obj
@run_command
def issue_cmd(
    env: Env,
    holder: str,
    tenant: str,
    allows: tuple[str, ...],
    audience: str | None,
    ttl: float,
    no_expiry: bool,
    out: Path | None,
) -> None:
    """Sign a capability token (written to --out, mode 0600; else printed as hex)."""
    import os

    from actors.server.guard import issue_capability
    from protocol import capabilities

    grants = [_grant(a) for a in allows]
    token = issue_capability(
        env.store,
        holder=holder,
        tenant=tenant,
        grants=grants,
        issued_by=f"cli:{os.environ.get('USER', 'admin')}",
        ttl=None if no_expiry else ttl,
        audience=audience,
    )
    cap = capabilities.decode(token)
    if out is not None:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(token)
    doc: dict[str, Any] = {
        "token_id": cap.token_id,
        "kid": cap.kid,
        "holder": cap.holder,
        "audience": cap.audience,
        "expires": cap.expires,
        "file": None if out is None else str(out),
        "token": None if out is not None else token.hex(),
    }
    emit(env, doc, lambda d: json.dumps(d, indent=2))


@grant_cmd.command("revoke")
@click.argument("token_id")
@click.pass_obj
@run_command
def revoke_cmd(env: Env, token_id: str) -> None:
    """Refuse the token TOKEN_ID in every context of --store from now on."""
    from actors.server.guard import revoke_token

    revoke_token(env.store, token_id)
    emit(env, {"revoked": token_id}, lambda d: f"revoked {d['revoked']}")


@grant_cmd.command("public-key")
@click.pass_obj
@run_command
def public_key_cmd(env: Env) -> None:
    """The signing key's public key (hex), published to --store; for MORPHZ_GRANT_PUBLIC_KEYS."""
    from actors.server.guard import grant_key
    from protocol import capabilities

    public = capabilities.public_key(grant_key(env.store))
    doc = {"public_key": public.hex(), "kid": capabilities.key_id(public)}
    emit(env, doc, lambda d: f"{d['public_key']}  (kid {d['kid']})")


@grant_cmd.command("directory-key")
@click.pass_obj
@run_command
def directory_key_cmd(env: Env) -> None:
    """The context directory's epoch-signing public key (hex; the key is made on first use
    here, on the machine that runs the directory): for MORPHZ_DIRECTORY_PUBLIC_KEYS on
    every node (docs/cluster.md, 'Epoch signatures')."""
    from protocol import capabilities
    from storage.keys import directory_key_path, directory_signing_key

    public = capabilities.public_key(directory_signing_key(create=True))
    doc = {
        "public_key": public.hex(),
        "kid": capabilities.key_id(public),
        "key_file": str(directory_key_path()),
    }
    emit(env, doc, lambda d: f"{d['public_key']}  (kid {d['kid']}, key {d['key_file']})")
