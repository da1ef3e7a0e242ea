"""The checks of a load test: each context's records against what it kept and what is on disk.

:func:`check_context` holds one context's submission records against its
export with :func:`harness.checker.check_history`; :func:`check_on_disk`
reads every acknowledged commit back from the store's files;
:func:`check_after_run` does both for one context after the load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.client.handle import ContextHandle, RetryPolicy
from harness.checker import Submission, Verdict, Violation, check_history
from protocol.errors import MorphzError
from protocol.state import Event, Frame
from service.admin import export_history
from storage import LmdbStore

CHECK_RETRY = RetryPolicy(attempts=30, initial=0.05, multiplier=2.0, max_delay=2.0)
"""Patience of the checking phase: a context killed last may still be restarting."""

SUBMITTED = ("committed", "rejected", "unknown")
"""Record outcomes of a transaction that reached (or may have reached) the context."""


def submissions_of(records: Sequence[Mapping[str, Any]]) -> list[Submission]:
    """The checker's submissions for agent records; ``skipped`` ones submitted nothing.

    ``source_events`` comes from the record when it has one; the synthetic
    workload cites events only where it also retires them, so none of its
    footprint keys is a source-only event.
    """
    out = []
    for r in records:
        if r.get("client_id") is None or r.get("outcome") not in (
            "committed",
            "rejected",
            "unknown",
        ):
            continue
        out.append(
            Submission(
                client_id=str(r["client_id"]),
                thread=str(r.get("thread", "?")),
                base_version=int(r["base_version"]),
                footprint=tuple(r.get("footprint") or ()),
                outcome=r["outcome"],
                version=None if r["outcome"] == "unknown" else r.get("version"),
                conflicts=tuple((str(c[0]), int(c[1])) for c in r.get("conflicts") or ()),
                error_code=r.get("error_code"),
                duplicate=bool(r.get("duplicate")),
                attempt=max(1, int(r.get("attempt") or 1)),
                source_events=tuple(r.get("source_events") or ()),
            )
        )
    return out


def check_context(records: Sequence[Mapping[str, Any]], export: Mapping[str, Any]) -> Verdict:
    """:func:`harness.checker.check_history` of *records* against a context's *export*.

    *export* is what :meth:`~actors.client.handle.ContextHandle.export` answers.
    """
    return check_history(
        submissions_of(records),
        export["log"],
        events=[Event.from_record(dict(e)) for e in export["events"]],
        final_frames=[Frame.from_record(dict(f)) for f in export["frames"]],
        final_relations=[tuple(r) for r in export["relations"]],
        window=int(export["window"]),
        history_keep=int(export["history_keep"]),
        tenant=export.get("tenant"),
        project=export.get("project"),
    )


def check_on_disk(
    path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]]
) -> list[Violation]:
    """Every acknowledged commit of *records*, read back from the store at *path* (R44).

    Opens the LMDB store read-only (beside a running actor); a committed
    record must be in the transaction log at its version under its client id.
    """
    acked = {
        (str(r["client_id"]), int(r["version"]))
        for r in records
        if r.get("outcome") == "committed" and r.get("version") is not None
    }
    store = LmdbStore.open(path, readonly=True)
    try:
        logged = store.read(lambda v: {n: v.txlog(n) for n in sorted({n for _, n in acked})})
    finally:
        store.close()
    out = []
    for client_id, version in sorted(acked, key=lambda a: a[1]):
        rec = logged.get(version)
        found = None if rec is None else rec.get("client_id")
        if found != client_id:
            out.append(
                Violation(
                    kind="not_on_disk",
                    detail=f"{client_id!r} was acknowledged at v{version}; the store on disk "
                    f"holds {found!r} there",
                )
            )
    return out


# --- figures -------------------------------------------------------------------


@dataclass
class ContextCheck:
    """What checking one context after the load found (see :func:`check_after_run`)."""

    violations: list[Violation] = field(default_factory=list)
    version: int | None = None
    replayed: int = 0
    log_records: int = 0
    on_disk: int = 0
    stats: dict[str, int] = field(default_factory=dict)


def check_after_run(
    handle: ContextHandle, records: Sequence[Mapping[str, Any]], disk_path: str | None
) -> ContextCheck:
    """Check one context: its export against *records*, then the store at *disk_path*.

    The export is read with :data:`CHECK_RETRY` patience; a context that cannot
    be exported is an ``export_failed`` violation. *disk_path* None (the store
    is on another machine) skips the on-disk read-back; ``on_disk`` counts the
    acknowledged commits read back.
    """
    out = ContextCheck()
    patient = ContextHandle(
        handle.actor, handle.name, namespace=handle.namespace, retry=CHECK_RETRY
    )
    try:
        export = export_history(patient)
        out.version = int(export["version"])
        verdict = check_context(records, export)
        out.violations.extend(verdict.violations)
        out.replayed = verdict.counts.replayed
        out.log_records = len(export["log"])
        out.stats = patient.stats()
    except MorphzError as e:
        out.violations.append(Violation(kind="export_failed", detail=f"{e.code}: {e.message}"))
    if disk_path is not None:
        try:
            out.violations.extend(check_on_disk(disk_path, records))
            out.on_disk = sum(1 for r in records if r["outcome"] == "committed")
        except MorphzError as e:
            out.violations.append(Violation(kind="not_on_disk", detail=f"{e.code}: {e.message}"))
    return out
