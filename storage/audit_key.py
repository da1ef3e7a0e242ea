"""The audit key: the HMAC key that chains a store's audit log, kept apart from the store.

``$MORPHZ_AUDIT_KEY_FILE`` names the file when set; otherwise
``$XDG_CONFIG_HOME/morphz/audit.key`` (``~/.config/morphz/audit.key``), made
once with 32 random bytes (hex), mode 0600 in a 0700 directory. Never inside a
store directory: a copy of a store (a backup, a file handed to someone, a tool
that edits it) does not carry the key, so it cannot re-chain edited rows.
Every process that writes a context's audit log must see the same file for one
chain to verify with one key (``morphz audit --verify`` takes more keys with
``--key-file``); docs/security.md says where to keep it on a cluster.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

from protocol.errors import RequestError
from storage.layout import DIR_MODE, FILE_MODE

AUDIT_KEY_ENV = "MORPHZ_AUDIT_KEY_FILE"
"""Environment variable naming the audit key file."""

_LOCK = threading.Lock()
_CACHE: dict[str, bytes] = {}


def audit_key_path() -> Path:
    """Where the audit key is read (and made on first use)."""
    named = os.environ.get(AUDIT_KEY_ENV)
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "morphz" / "audit.key"


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
    path = audit_key_path()
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
