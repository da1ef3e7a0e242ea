"""Forking a context at a version (R39): new tasks start from learned structured context.

A fork replays the source's transaction log up to the chosen version into an
empty store, so the fork holds exactly the frames, relations and lifecycles
the source had at that version, with the same versions and ticks, and its own
log. Observations recorded up to that version's commit time come along
(immutable history; lifecycles as of the version); later ones do not — except
in a fork at the current version, which takes every observation the source
holds, the inputs still waiting to be claimed and the source's tick, so
nothing recorded but not yet used is silently dropped.
Delivery of user requests is not logged, so copied requests keep the
source's current delivery flag.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from protocol.engine import evaluate, finalize_due
from protocol.errors import NotFound, OutOfRange, RequestError, StoreError
from protocol.state import ACTIVE, Meta
from protocol.view import Changeset, ReadView, WriteView
from service.reads import logged_tx
from storage import LmdbStore, check_context_name, context_path
from storage.backend import Backend

ASIDE = ".morphz-"
"""Prefix of the directories a fork is built in and a drop is moved to (never a context
name: a context name cannot start with a dot)."""


def fork_into(
    source: Backend, target: Backend, *, at_version: int | None = None, origin: str = ""
) -> dict[str, Any]:
    """Replay *source* up to *at_version* (default: its current version) into *target*.

        *target* must be empty. Returns ``{"version", "tick", "events", "waiting", "origin"}``
    (``waiting``: the unclaimed inputs carried over, only in a fork at the current version).
        Raises OutOfRange for a version the source does not have.
    """

    def gather(
        v: ReadView,
    ) -> tuple[Meta, list[dict[str, Any]], list[Any], dict[int, str], list[int] | None]:
        meta = v.meta()
        version = meta.version if at_version is None else at_version
        if not 0 <= version <= meta.version:
            # A version not yet committed is refused (future_version, exit 1 on the command
            # line); a negative one is malformed (out_of_range, exit 2).
            raise OutOfRange(
                f"version {version} is not between 0 and {meta.version}",
                code="future_version" if version > meta.version else None,
            )
        records = []
        for n in range(1, version + 1):
            rec = v.txlog(n)
            if rec is None:
                raise NotFound(f"the log has no record for version {n}")
            records.append(rec)
        waiting: list[int] | None = None
        if version == meta.version:  # everything recorded, claimed or waiting, comes along
            events = list(v.iter_events())
            waiting = list(v.inbox())
        else:
            cutoff = records[-1]["time"] if records else None
            events = [e for e in v.iter_events() if cutoff is None or e.time <= cutoff]
            if version == 0:
                events = []
        contents = {e.seq: v.event_content(e.seq) or "" for e in events}
        return meta, records, events, contents, waiting

    meta, records, events, contents, waiting = source.read(gather)

    def is_empty(v: ReadView) -> bool:
        m = v.meta()
        return m.version == 0 and not list(v.iter_events(1))

    if not target.read(is_empty):
        raise RequestError("a fork needs an empty target store", code="fork_target_not_empty")

    fresh = []
    for e in events:
        w = e.copy()
        w.lifecycle = ACTIVE
        w.retired_version = None
        fresh.append(w)
    version = len(records)
    last_tick = records[-1]["tick"] if records else 0
    if waiting is not None:  # at the current version: the source's tick, claims included
        last_tick = meta.tick
    start = Meta(
        window=meta.window,
        history_keep=meta.history_keep,
        next_seq=max((e.seq for e in events), default=0) + 1,
        created=meta.created or 1.0,
        tenant=meta.tenant,
        project=meta.project,
        # Where the fork comes from: the merge base of a later diff or merge
        # (docs/branches.md). Tags stay with the source.
        branches={"fork": {"origin": origin, "version": version}} if origin else None,
    )

    def load(w: WriteView) -> None:
        w.apply(
            Changeset(
                meta=start,
                events=fresh,
                contents=[(seq, text) for seq, text in contents.items()],
            )
        )
        for rec in records:
            m = w.meta().copy()
            m.tick = rec["tick"]
            w.apply(Changeset(meta=m))
            if rec["kind"] == "model":
                tx = logged_tx(rec)
                if rec.get("client_id") and tx.client_id is None:
                    tx = tx.model_copy(update={"client_id": rec["client_id"]})
                outcome = evaluate(w, tx, now=rec["time"], text=rec.get("text"))
                if outcome.changes is None or outcome.receipt.version != rec["version"]:
                    raise RequestError(
                        f"the log does not replay at version {rec['version']}",
                        code="fork_replay_failed",
                    )
                changes = outcome.changes
            elif rec["kind"] == "governance":
                from protocol.governance import replay_decisions

                _, decided = replay_decisions(w, rec)
                if decided is None:
                    raise RequestError(
                        f"the log does not replay at version {rec['version']}",
                        code="fork_replay_failed",
                    )
                changes = decided
            else:
                _, changes = finalize_due(w, tick=rec["tick"], now=rec["time"])
            w.apply(changes)
        m = w.meta().copy()
        m.tick = last_tick
        w.apply(Changeset(meta=m, inbox_add=list(waiting or ())))

    target.transact(load)
    return {
        "version": version,
        "tick": last_tick,
        "events": len(events),
        "waiting": len(waiting or ()),
        "origin": origin,
    }


def fork_store(
    store_dir: str | os.PathLike[str], source: str, new: str, *, at_version: int | None = None
) -> dict[str, Any]:
    """Fork context *source* of the store at *store_dir* into the new context *new*.

    Atomic: the fork is built in a directory aside and renamed into place only once
    complete, so a failed fork leaves no context *new* behind and a retry can succeed.
    The source is read through a read-only open, which runs beside its writer.
    RequestError ``exists`` if *new* exists, NotFound if *source* does not.
    Returns what :func:`fork_into` returns, with ``context`` set to *new*.
    """
    root = Path(store_dir)
    check_context_name(new)
    final = context_path(root, new)
    if LmdbStore.exists(final):
        raise RequestError(f"context {new!r} already exists", code="exists")
    if not LmdbStore.exists(context_path(root, source)):
        raise NotFound(f"no context {source!r} in {root}")
    aside = root / f"{ASIDE}fork-{new}-{uuid.uuid4().hex[:12]}"
    try:
        src = LmdbStore.open(context_path(root, source), readonly=True)
        try:
            target = LmdbStore.open(aside, create=True)
            try:
                doc = fork_into(src, target, at_version=at_version, origin=source)
            finally:
                target.close()
        finally:
            src.close()
        try:
            os.rename(aside, final)
        except OSError as e:
            if LmdbStore.exists(final):
                raise RequestError(f"context {new!r} already exists", code="exists") from e
            raise StoreError(f"cannot move the fork into place at {final}: {e}") from e
    finally:
        if aside.exists():
            shutil.rmtree(aside, ignore_errors=True)
    doc["context"] = new
    return doc
