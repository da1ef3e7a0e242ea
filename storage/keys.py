"""Keys kept apart from the stores: the audit key and the per-context erasure keys.

Both live in the key directory: ``$MORPHZ_KEY_DIR``, else
``$XDG_CONFIG_HOME/morphz`` (``~/.config/morphz``), 0700, each key file made
once with 32 random bytes (hex), mode 0600.

The **audit key** chains every store's audit log (HMAC-SHA256, see
:func:`protocol.governance.append_audit`): ``$MORPHZ_AUDIT_KEY_FILE`` when set,
else ``<key dir>/audit.key``. Never inside a
store directory: a copy of a store (a backup, a file handed to someone, a tool
that edits it) does not carry the key, so it cannot re-chain edited rows.
Every process that writes a context's audit log must see the same file for one
chain to verify with one key (``morphz audit --verify`` takes more keys with
``--key-file``); docs/security.md says where to keep it on a cluster.

An **erasure key** per context keys the digest a tombstone keeps of forgotten
text (:func:`protocol.forget.content_digest`): ``<key dir>/erasure/<id>.key``,
where ``<id>`` is derived from the context's tenant, project and creation time
(:func:`context_key_id`), so a copy of the store does not carry it, and
:func:`destroy_erasure_key` makes every digest of that context unverifiable for good.

The **directory's signing key** (Ed25519) signs every epoch of every replicated context
and the directory's own state (:mod:`storage.replication.epochs`). It is kept *beside*
the key directory, never in it: ``$MORPHZ_DIRECTORY_KEY_FILE``, else
``<parent of the key dir>/morphz-directory/epoch-signing.key`` (made on first use by the
directory, with its public key in ``epoch-signing.pub`` next to it), so handing a node
the key directory (the replication and audit keys) does not hand it this key. Members
read only public keys: ``$MORPHZ_DIRECTORY_PUBLIC_KEYS`` (the trust anchor on a
cluster), else that ``.pub`` file (one machine).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from pathlib import Path

from protocol.errors import RequestError
from storage.layout import DIR_MODE, FILE_MODE

AUDIT_KEY_ENV = "MORPHZ_AUDIT_KEY_FILE"
"""Environment variable naming the audit key file."""
DIRECTORY_KEY_ENV = "MORPHZ_DIRECTORY_KEY_FILE"
"""Environment variable naming the directory's epoch signing key file."""
DIRECTORY_PUBLIC_KEYS_ENV = "MORPHZ_DIRECTORY_PUBLIC_KEYS"
"""Environment variable holding the directory's public keys (hex, separated by commas)."""
KEY_DIR_ENV = "MORPHZ_KEY_DIR"
"""Environment variable naming the key directory."""

_LOCK = threading.Lock()
_CACHE: dict[str, bytes] = {}
_PUBLISHED: set[str] = set()


def key_dir() -> Path:
    """The key directory (``$MORPHZ_KEY_DIR``, else ``$XDG_CONFIG_HOME/morphz``)."""
    named = os.environ.get(KEY_DIR_ENV)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "morphz"


def audit_key_path() -> Path:
    """Where the audit key is read (and made on first use)."""
    named = os.environ.get(AUDIT_KEY_ENV)
    return Path(named) if named else key_dir() / "audit.key"


def context_key_id(tenant: str | None, project: str | None, created: float) -> str:
    """The name of a context's erasure key: a digest of what identifies the context."""
    ident = f"{tenant}\0{project}\0{created!r}".encode()
    return hashlib.sha256(b"morphz-erasure-key\0" + ident).hexdigest()[:32]


def erasure_key_path(key_id: str) -> Path:
    """Where the erasure key named *key_id* is kept."""
    return key_dir() / "erasure" / f"{key_id}.key"


def erasure_key(key_id: str) -> bytes:
    """The erasure key named *key_id* (read, or made once)."""
    return key_at(erasure_key_path(key_id))


def destroy_erasure_key(key_id: str) -> bool:
    """Delete the erasure key named *key_id*: the digests made with it can no longer be
    checked against a guess (a new key is made if the context forgets again). True if
    there was one."""
    path = erasure_key_path(key_id)
    with _LOCK:
        _CACHE.pop(str(path), None)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
    return True


def read_key_file(path: Path) -> bytes:
    """The key in *path* (64 hex digits); ``bad_audit_key`` when it holds anything else."""
    for _ in range(100):  # another process may be writing it this instant
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise RequestError(
                f"cannot read the audit key {path}: {e}", code="bad_audit_key"
            ) from e
        if len(text) == 64:
            try:
                return bytes.fromhex(text)
            except ValueError:
                break
        time.sleep(0.01)
    raise RequestError(f"audit key file {path} is malformed (64 hex digits)", code="bad_audit_key")


def audit_key() -> bytes:
    """The audit key of this process (read, or made once; cached per path)."""
    return key_at(audit_key_path())


def key_at(path: Path) -> bytes:
    """The 32-byte key kept in *path* (64 hex digits), made once (0600, directory 0700)."""
    with _LOCK:
        key = _CACHE.get(str(path))
        if key is not None:
            return key
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
                f.flush()
                os.fsync(f.fileno())
        key = _CACHE[str(path)] = read_key_file(path)
        return key


def directory_key_path() -> Path:
    """Where the directory's epoch signing key is read (and made on first use)."""
    named = os.environ.get(DIRECTORY_KEY_ENV)
    return Path(named) if named else key_dir().parent / "morphz-directory" / "epoch-signing.key"


def directory_signing_key(*, create: bool | None = None) -> bytes:
    """The directory's Ed25519 signing key (its 32-byte seed; made once, with its public key
    written beside it as ``<name>.pub``). Only the directory process calls this.

    *create* (default: only when ``$MORPHZ_DIRECTORY_PUBLIC_KEYS`` is unset) says whether a
    missing key may be made: on a cluster whose nodes trust named public keys, a directory
    restarted where its key is not must stop (``no_directory_key``), not sign with a new
    key nobody trusts."""
    from protocol.capabilities import public_key

    path = directory_key_path()
    if create is None:
        create = not os.environ.get(DIRECTORY_PUBLIC_KEYS_ENV, "").strip()
    if not create and str(path) not in _CACHE and not path.exists():
        raise RequestError(
            f"the directory's signing key {path} is not on this node, and"
            f" {DIRECTORY_PUBLIC_KEYS_ENV} names the keys members trust: copy the key here"
            " (or run the directory where it is); no new key is made",
            code="no_directory_key",
        )
    seed = key_at(path)
    if str(path) in _PUBLISHED:
        return seed
    pub = path.with_suffix(".pub")
    text = public_key(seed).hex()
    try:
        current = pub.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        current = ""
    if current != text:
        tmp = pub.with_suffix(".pub.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, pub)
    _PUBLISHED.add(str(path))
    return seed


def directory_public_keys() -> dict[str, bytes]:
    """The directory's public keys a member checks epochs with, by key id:
    ``$MORPHZ_DIRECTORY_PUBLIC_KEYS`` when set, else the ``.pub`` file beside the
    default signing key path; ``no_directory_key`` when neither names a valid key."""
    from protocol.capabilities import SEED_BYTES, key_id

    named = os.environ.get(DIRECTORY_PUBLIC_KEYS_ENV, "")
    where = f"${DIRECTORY_PUBLIC_KEYS_ENV}"
    if named.strip():
        texts = named.replace(",", " ").split()
    else:
        path = directory_key_path().with_suffix(".pub")
        where = str(path)
        try:
            texts = path.read_text(encoding="ascii").split()
        except (OSError, UnicodeDecodeError):
            texts = []
    out: dict[str, bytes] = {}
    for text in texts[:16]:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            continue
        if len(raw) == SEED_BYTES:
            out[key_id(raw)] = raw
    if not out:
        raise RequestError(
            f"no public key of the context directory on this node ({where}): set"
            f" {DIRECTORY_PUBLIC_KEYS_ENV} to what `morphz grant directory-key` prints"
            " (docs/cluster.md, 'Epoch signatures')",
            code="no_directory_key",
        )
    return out
