"""Explicit sharing of one frame between contexts: a sealed export package, and its import.

Exporting reads a frame, its sources' summaries (240 characters each) and where
it comes from (tenant, project, context, version, revision) into a package
sealed with the grant key (:func:`protocol.capabilities.seal`). Importing checks
the seal and derives a new frame (``imported/<context>/<frame>`` unless named)
whose body starts with a ``(provenance …)`` form, in a transaction whose client
id is a digest of the package and the new id: importing the same package again
answers the first receipt, marked ``duplicate``.

Each step's audit entry (:func:`export_entry`, :func:`import_entry`) is durable
before the step answers: :func:`export_frame` and :func:`import_frame` (the
service functions of the two operations) write it themselves, naming the caller's
holder. The key that seals packages is the port's, injected with the
:class:`~service.registry.Caller` (the context actor's grant key; embedded,
``ctx.acting(key=...)``): no argument carries it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import Field, Strict

from protocol import capabilities
from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError, RequestError
from protocol.forms import Symbol, from_plain
from protocol.governance import audit_entry
from protocol.tx import ContextTx, Derive
from protocol.wire import MAX_PAYLOAD_BYTES
from service.registry import EMBEDDED as EMBEDDED_CALLER
from service.registry import Caller, FrameId

if TYPE_CHECKING:
    from service.context import Context

log = logging.getLogger("morphz.sharing")

SUMMARY_CHARS = 240
"""Characters of each source's summary a package carries."""


class ImportPlan(NamedTuple):
    """An opened package: its document, the new frame's id and body, and the import's digest."""

    doc: dict[str, Any]
    frame_id: str
    body: tuple[Any, ...]
    digest: str


def package_document(
    ctx: Context, frame_id: str, *, tenant: str, project: str, now: float
) -> dict[str, Any]:
    """The export document of *frame_id* (NotFound for an unknown frame), not yet sealed."""
    f = ctx.frame(frame_id)
    sources = []
    for ref in f["sources"]:
        try:
            if ref.startswith("@e") or ref.startswith("ev:"):
                summary = str(ctx.event(ref)["preview"])
            else:
                summary = str(ctx.frame(ref)["body"])
        except MorphzError:
            summary = ""
        sources.append({"ref": ref, "summary": summary[:SUMMARY_CHARS]})
    return {
        "tenant": tenant,
        "project": project,
        "context": ctx.name,
        "version": ctx.version(),
        "frame": f["id"],
        "revision": f["revision"],
        "body_forms": f["body_forms"],
        "sources": sources,
        "exported_at": now,
    }


def seal(doc: dict[str, Any], key: bytes) -> bytes:
    """The package of an export document: *doc* sealed with *key*."""
    return capabilities.seal(doc, key)


def open_package(package: bytes, key: bytes, as_id: str | None = None) -> ImportPlan:
    """Check *package*'s seal and plan its import (as *as_id*, or ``imported/<ctx>/<frame>``).

    PermissionDenied for a seal that does not verify or a malformed package;
    RequestError ``bad_argument`` for an *as_id* that is not a string.
    """
    try:
        doc = capabilities.unseal(package, key)
        if not isinstance(doc, dict):
            raise PermissionDenied("malformed package")
        new_id = as_id if as_id is not None else f"imported/{doc['context']}/{doc['frame']}"
        if not isinstance(new_id, str):
            raise RequestError(
                f"frame id must be a string, not {type(new_id).__name__}", code="bad_argument"
            )
        provenance = (
            Symbol("provenance"),
            (Symbol("from-tenant"), str(doc["tenant"])),
            (Symbol("from-project"), str(doc["project"])),
            (Symbol("from-context"), str(doc["context"])),
            (Symbol("version"), int(doc["version"])),
            (Symbol("frame"), str(doc["frame"])),
            (Symbol("revision"), int(doc["revision"])),
            (Symbol("sources"), *((str(s["ref"]), str(s["summary"])) for s in doc["sources"])),
        )
        body = (provenance, *(from_plain(x) for x in doc["body_forms"]))
        digest = hashlib.sha256(bytes(package) + new_id.encode()).hexdigest()[:32]
    except MorphzError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise PermissionDenied(f"malformed package: {e}") from e
    return ImportPlan(doc, new_id, body, digest)


def commit_import(ctx: Context, plan: ImportPlan) -> dict[str, Any]:
    """Derive the planned frame; the receipt's dict form.

    A package imported before under the same id answers the first receipt with
    ``"duplicate": True``. RequestError ``bad_argument`` for a frame id or body
    the transaction language refuses.
    """
    cid = f"import-{plan.digest}"
    known = ctx.backend.read(lambda v: v.client(cid))
    if known is not None:  # imported before (its base version differed): the same answer
        original = dict(ctx.txlog(known[0])["receipt"])
        return {**original, "duplicate": True}
    try:
        tx = ContextTx(
            base_version=ctx.version(),
            reason="import",
            client_id=cid,
            ops=(Derive(id=plan.frame_id, body=plan.body),),
        )
    except ValueError as e:  # pydantic: a bad frame id or body
        raise RequestError(f"cannot import: {e}", code="bad_argument") from e
    return ctx.commit(tx).to_dict()


def export_entry(
    doc: dict[str, Any], *, holder: str | None, context: str, tenant: str, now: float
) -> dict[str, Any]:
    """The audit entry, made at *now*, of an export (operation ``read``, allowed)."""
    return audit_entry(
        "export_frame",
        "read",
        holder=holder,
        allowed=True,
        at=now,
        why=f"exported {doc['frame']} at version {doc['version']}",
        context=context,
        tenant=tenant,
    )


def import_entry(
    plan: ImportPlan | None,
    receipt: dict[str, Any] | None,
    *,
    holder: str | None,
    context: str,
    tenant: str,
    now: float,
    refused: MorphzError | None = None,
) -> dict[str, Any]:
    """The audit entry, made at *now*, of an import (operation ``admin``).

    Refused with *refused*'s message, else allowed when *receipt* committed,
    refused when it was rejected.
    """
    if refused is not None or plan is None or receipt is None:
        why = refused.message if refused is not None else "refused"
        return audit_entry(
            "import_frame",
            "admin",
            holder=holder,
            allowed=False,
            why=why,
            at=now,
            outcome="refused",
            context=context,
            tenant=tenant,
        )
    committed = receipt.get("status") == "committed"
    doc = plan.doc
    return audit_entry(
        "import_frame",
        "admin",
        holder=holder,
        allowed=committed,
        at=now,
        outcome=None if committed else "refused",
        why=(
            f"imported {doc['context']}/{doc['frame']}@{doc['version']}"
            f" as {plan.frame_id}: {receipt.get('status')}"
        ),
        context=context,
        tenant=tenant,
        version=receipt.get("version"),
    )


Package = Annotated[bytes, Strict(), Field(max_length=MAX_PAYLOAD_BYTES)]
"""An exported package: bytes, as :func:`export_frame` answered them."""


def export_frame(ctx: Context, frame_id: FrameId, *, caller: Caller = EMBEDDED_CALLER) -> bytes:
    """A package of one frame, its sources' summaries and provenance, sealed with the key
    of the port serving the call (the context actor's grant key; embedded,
    ``ctx.acting(key=...)``), for ``import_frame`` into another context.

    Its audit entry (method ``export_frame``, the caller's holder) is durable before the
    package is returned. It names the port's tenant and project (else the context's).
    """
    key = caller.sealing_key()
    meta = ctx.meta()
    tenant = caller.tenant or meta.tenant or "default"
    doc = package_document(
        ctx,
        frame_id,
        tenant=tenant,
        project=caller.project or meta.project or "default",
        now=time.time(),
    )
    entry = export_entry(
        doc, holder=caller.holder, context=ctx.name, tenant=tenant, now=time.time()
    )
    _record(ctx, entry)
    return seal(doc, key)


def import_frame(
    ctx: Context,
    package: Package,
    as_id: FrameId | None = None,
    *,
    caller: Caller = EMBEDDED_CALLER,
) -> dict[str, Any]:
    """Derive a frame from a package sealed with the port's key (see ``export_frame``);
    ``{"id", "receipt"}``.

    The new frame (*as_id*, default ``imported/<context>/<frame>``) starts with a
    provenance form; importing a package again answers the first receipt as a
    duplicate. A package that does not verify is refused (PermissionDenied) after
    its refusal is audited (a store that cannot write that entry is logged, not
    answered); an import's audit entry is durable before the answer.
    """
    who, scope = caller.holder, caller.tenant or ctx.meta().tenant or "default"
    try:
        plan = open_package(package, caller.sealing_key(), as_id)
    except MorphzError as e:
        refusal = import_entry(
            None, None, holder=who, context=ctx.name, tenant=scope, now=time.time(), refused=e
        )
        try:
            _record(ctx, refusal)
        except Exception:
            log.exception("cannot write the audit entry of import_frame")
        raise
    receipt = commit_import(ctx, plan)
    _record(
        ctx,
        import_entry(plan, receipt, holder=who, context=ctx.name, tenant=scope, now=time.time()),
    )
    return {"id": plan.frame_id, "receipt": receipt}


def _record(ctx: Context, entry: dict[str, Any]) -> None:
    from service.governance import record_audit

    record_audit(ctx.backend, [entry])
