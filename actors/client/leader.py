"""Which context directory leads a namespace: the signed lead record, read by every caller.

A namespace may run more than one directory actor: the first, ``morphz:directory``, and
a **standby** on another node (``morphz:directory~<random>``) that takes over when the
leader's node is lost (:mod:`actors.cluster.leadership`). Exactly one leads at a time:
the one named by the newest **lead record** in the GCS key-value store (namespace
``morphz-directory/<namespace>``, key ``lead/<term>``: :class:`Lead` as JSON). Each term's
key is written create-only (``overwrite=False``), so two directories never both win a
term, and every record carries the directory's Ed25519 signature
(:func:`protocol.epochs.sign_record`): a record any other Ray process wrote does not
verify and is skipped, so it cannot send callers to an actor of its own.

:func:`directory_actor` is what every caller (handles, hosts, the failover of a context's
handle) uses to reach the directory: the leader's actor, else ``morphz:directory`` (no
lead record yet, or none that verifies: a directory older than lead records). Ray is
imported when a function runs, never at import.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from actors.client.joining import check_text, ray_module
from actors.client.names import DEFAULT_NAMESPACE, DIRECTORY_NAME, is_directory
from actors.client.nodes import ensure_ray
from protocol.epochs import open_record
from protocol.errors import MorphzError

log = logging.getLogger("morphz.directory")

DIRECTORY_KV = "morphz-directory/"
"""Prefix of the GCS internal-KV namespace holding a directory's state (+ the Ray namespace)."""
LEAD_PREFIX = "lead/"
"""Key prefix of the lead records: ``lead/<term>``."""
MAX_LEAD_BYTES = 4096
"""A lead record longer than this is not one."""
MAX_TERM_DIGITS = 18
"""A term key with more digits than this is not one (a term fits a signed 64-bit int)."""
_REPORTED_MAX = 256
"""Distinct skipped keys logged at warning level per process (then at debug level)."""
_reported: set[tuple[str, str, str]] = set()

__all__ = [
    "DIRECTORY_KV",
    "LEAD_PREFIX",
    "Lead",
    "directory_actor",
    "directory_target",
    "lead_key",
    "lead_terms",
    "leader_name",
    "open_lead",
    "read_lead",
    "read_leader",
    "term_of",
]


class Lead(BaseModel):
    """One leadership term of a namespace's directory: which actor leads, from which node,
    and which incarnation of it (a restarted actor keeps its name, not its term)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    term: int
    actor: str
    node_id: str
    incarnation: str


def lead_key(term: int) -> str:
    """The KV key of *term*'s lead record."""
    return f"{LEAD_PREFIX}{term}"


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv


def _skipped(namespace: str, key: str, why: str) -> None:
    """Log that *namespace*'s key *key* is skipped as no lead record: a warning the first
    time in this process (each check lists the keys again: no log line per look), then at
    debug level."""
    seen = (namespace, key, why)
    if seen in _reported:
        log.debug("directory of %r: lead record %r skipped: %s", namespace, key, why)
        return
    if len(_reported) >= _REPORTED_MAX:
        _reported.clear()
    _reported.add(seen)
    log.warning("directory of %r: lead record %r skipped: %s", namespace, key, why)


def term_of(namespace: str, key: bytes | str) -> int | None:
    """The term a KV key ``lead/<term>`` of *namespace* names (ASCII digits, canonical: no
    sign, no leading zero, at most :data:`MAX_TERM_DIGITS`), else None with a log line."""
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    digits = text[len(LEAD_PREFIX) :] if text.startswith(LEAD_PREFIX) else ""
    if (
        not digits.isascii()
        or not digits.isdigit()
        or len(digits) > MAX_TERM_DIGITS
        or lead_key(int(digits)) != text
    ):
        _skipped(namespace, text[: 2 * MAX_TERM_DIGITS], "its key names no term")
        return None
    return int(digits)


def lead_terms(namespace: str) -> list[int]:
    """Every term with a lead record under its key in *namespace* (verified or not), newest
    first; a key that names no term is skipped (:func:`term_of`)."""
    terms = []
    for key in _kv()._internal_kv_list(LEAD_PREFIX, namespace=DIRECTORY_KV + namespace):
        term = term_of(namespace, bytes(key))
        if term is not None:
            terms.append(term)
    return sorted(terms, reverse=True)


def _public_keys() -> list[bytes]:
    from storage.keys import directory_public_keys

    return list(directory_public_keys().values())


def open_lead(namespace: str, term: int, raw: bytes, public: list[bytes]) -> Lead | None:
    """The lead record *raw* kept under *term*'s key once it verifies under *public*, else
    None with a log line (too long, unsigned, forged, moved from another key, not a lead
    record of the right fields and types, or naming another term or a non-directory actor).
    Pure: no I/O; it never raises on any *raw*."""
    key = lead_key(term)
    if len(raw) > MAX_LEAD_BYTES:
        _skipped(namespace, key, f"longer than {MAX_LEAD_BYTES} bytes")
        return None
    try:
        lead = Lead.model_validate_json(open_record(public, namespace, key, bytes(raw)))
    except (MorphzError, ValidationError) as e:
        _skipped(namespace, key, e.message if isinstance(e, MorphzError) else "not a lead record")
        return None
    if lead.term != term or not is_directory(lead.actor):
        _skipped(namespace, key, "it names another term or a non-directory actor")
        return None
    return lead


def read_lead(namespace: str, term: int, public: list[bytes] | None = None) -> Lead | None:
    """*term*'s lead record once it verifies under the directory's public keys (*public*,
    default :func:`storage.keys.directory_public_keys`), else None (absent, or skipped by
    :func:`open_lead`)."""
    raw = _kv()._internal_kv_get(lead_key(term), namespace=DIRECTORY_KV + namespace)
    if raw is None:
        return None
    try:
        keys = _public_keys() if public is None else public
    except MorphzError:  # this process trusts no directory key: no record verifies
        return None
    return open_lead(namespace, term, bytes(raw), keys)


def read_leader(namespace: str, public: list[bytes] | None = None) -> Lead | None:
    """The newest lead record of *namespace* that verifies, or None."""
    for term in lead_terms(namespace):
        lead = read_lead(namespace, term, public)
        if lead is not None:
            return lead
    return None


def directory_target(namespace: str = DEFAULT_NAMESPACE) -> tuple[str, Any] | None:
    """``(actor name, Ray handle)`` of the directory leading *namespace* (the actor its
    newest verified lead record names, else ``morphz:directory``), or None if it has none."""
    check_text(namespace, "namespace")
    ensure_ray()
    ray = ray_module()
    try:
        lead = read_leader(namespace)
    except Exception as e:  # the GCS cannot be read now: the first directory's name
        log.info("directory of %r: lead record not read: %s", namespace, e)
        lead = None
    for name in ([lead.actor] if lead is not None else []) + [DIRECTORY_NAME]:
        try:
            return name, ray.get_actor(name, namespace=namespace)
        except ValueError:
            continue
    return None


def directory_actor(namespace: str = DEFAULT_NAMESPACE) -> Any | None:
    """The Ray handle of the directory leading *namespace* (:func:`directory_target`), or
    None if it has none."""
    target = directory_target(namespace)
    return None if target is None else target[1]


def leader_name(namespace: str) -> str | None:
    """The actor name of *namespace*'s leading directory per its lead records, or None."""
    try:
        lead = read_leader(namespace)
    except Exception:
        return None
    return None if lead is None else lead.actor
