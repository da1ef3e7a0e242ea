"""Where contexts live: ``<store dir>/<context name>/`` is one LMDB environment."""

from __future__ import annotations

import os
import re
from pathlib import Path

from protocol.errors import RequestError

DIR_MODE = 0o700
"""Mode of the directories a store creates: only its owner may list or enter them."""
FILE_MODE = 0o600
"""Mode of the files a store creates (data, locks, keys, indexes): only its owner reads them."""


def replace_durably(source: str, dest: str) -> None:
    """Move the file *source* over *dest* so that a crash leaves one or the other whole:
    *source* is synced first, then renamed, then the directory of *dest* is synced (the
    rename itself survives a power loss). ``OSError`` if the disk refuses."""
    with open(source, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(source, dest)
    dir_fd = os.open(os.path.dirname(os.path.abspath(dest)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def check_context_name(name: object) -> str:
    """Return *name* if it can name a context (letters, digits, ``._-``; at most 64)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RequestError(
            f"bad context name {name!r}: use 1-64 letters, digits, '.', '_' or '-'",
            code="bad_context_name",
        )
    return name


def context_path(store_dir: str | os.PathLike[str], name: str) -> Path:
    """The directory of context *name* in the store at *store_dir*."""
    return Path(store_dir) / check_context_name(name)
