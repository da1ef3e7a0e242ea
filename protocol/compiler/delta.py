"""ContextDelta (R37): the previous input kept byte for byte, plus one message of what changed.

With :attr:`~protocol.compiler.CompilerConfig.context_delta` on, a call that
follows one of the same session keeps the previous messages and appends one
``## context-delta`` message: new observations, observations out of view,
frames changed or out of view, relations added or removed, the sessions if
they changed, and ``## runtime changes``. Every ``delta_rebase_every`` calls,
or when a delta would cost more than re-rendering the state, the input is
rendered in full again (:func:`delta_input` answers None).
"""

from __future__ import annotations

from protocol.compiler.capacity import capacity_for, settle
from protocol.compiler.config import (
    DELTA_HEADER,
    MAX_DELTA_SPAN,
    MESSAGE_OVERHEAD,
    OBSERVATIONS_HEADER,
)
from protocol.compiler.facts import replay
from protocol.compiler.render import Renderer
from protocol.compiler.sections import (
    Session,
    Snapshot,
    render_runtime_changes,
    retrieved,
    runtime_lines,
    sessions_text,
)
from protocol.state import HIDDEN_TRUST, Event
from protocol.turns import Capacity, CompiledInput
from protocol.view import ReadView


def delta_input(
    r: Renderer,
    view: ReadView,
    snap: Snapshot,
    cur: Session,
    others: list[Session],
    modes: dict[str, str],
    shown: list[Event],
    request: Event | None,
    previous: CompiledInput,
    overflow: bool,
    full_uncached: int,
) -> CompiledInput | None:
    """The previous messages plus one delta message, or None to render in full.

    None when the chain is due for a re-render (every ``delta_rebase_every``
    calls) or when the delta would cost more than a full render sends beyond
    the prefix it shares with the previous request (*full_uncached*; with no
    observation retired that is the new observations plus the state block).
    """
    cfg = r.config
    meta = snap.meta
    msgs = previous.messages
    if (
        previous.maintenance_batch
        or len(msgs) < 3
        or msgs[0].get("content") != r.protocol.text
        or not str(msgs[1].get("content", "")).startswith(OBSERVATIONS_HEADER)
        or not str(msgs[2].get("content", "")).startswith("## frames")
        or previous.version > meta.version
        or previous.tick > meta.tick
        or meta.version - previous.version > MAX_DELTA_SPAN
        or len(msgs) - 2 >= cfg.delta_rebase_every
    ):
        return None
    contents = [str(m.get("content", "")) for m in msgs[2:]]
    before = replay(contents)
    if before is None:
        return None
    prev_events = set(previous.events_present)
    prev_frames = set(previous.frames_present)
    added = [e for e in shown if e.ref not in prev_events]
    now_events = {e.ref for e in shown}
    gone_events = [ref for ref in previous.events_present if ref not in now_events]
    visible = {f.id: f for f in snap.frames}
    changed = [
        f for f in snap.frames if f.updated_version > previous.version or f.id not in prev_frames
    ]
    gone_frames = [fid for fid in previous.frames_present if fid not in visible]
    rel_now = set(snap.relations)
    rel_added = sorted(rel_now - before.relations)
    rel_removed = sorted(before.relations - rel_now)
    sessions = sessions_text(cur, others, modes, None)

    header = DELTA_HEADER
    parts: list[str] = []
    plain = [header]  # the parts whose tokens are not cached per record
    tokens = 0
    if added:
        ps = [r.observation(view, e) for e in added]
        parts.append("### new observations\n" + "\n".join(p.text for p in ps))
        plain.append("### new observations")
        tokens += sum(p.tokens for p in ps)
    if gone_events:
        parts.append("### observations out of view\n" + " ".join(gone_events))
        plain.append(parts[-1])
    if changed:
        ps = [r.frame(view, f) for f in changed]
        parts.append("### frames changed\n" + "\n".join(p.text for p in ps))
        plain.append("### frames changed")
        tokens += sum(p.tokens for p in ps)
    if gone_frames:
        lines = []
        for fid in gone_frames:
            f = view.frame(fid)
            state = "gone" if f is None else f.trust if f.trust in HIDDEN_TRUST else f.lifecycle
            lines.append(f"{fid} ({state})")
        parts.append("### frames out of view\n" + "\n".join(lines))
        plain.append(parts[-1])
    if rel_added:
        parts.append("### relations added\n" + "\n".join(" ".join(x) for x in rel_added))
        plain.append(parts[-1])
    if rel_removed:
        parts.append("### relations removed\n" + "\n".join(" ".join(x) for x in rel_removed))
        plain.append(parts[-1])
    if sessions != before.sessions:
        parts.append(sessions)
        plain.append(parts[-1])
    body = "\n\n".join([header, *parts])
    tokens += r.count("\n\n".join(plain))
    base = previous.tokens + MESSAGE_OVERHEAD + tokens

    def runtime(total: int) -> tuple[str, Capacity]:
        cap = capacity_for(cfg, total, previous, overflow)
        lines = runtime_lines(meta, cfg, cap, total, request, cur, snap, None)
        return render_runtime_changes(lines, before.runtime), cap

    if not parts:
        # Nothing changed: the previous input stands as it is if its runtime does too.
        text, cap = runtime(previous.tokens)
        if not text:
            return CompiledInput(
                messages=msgs,
                tokens=previous.tokens,
                prefix_tokens=previous.tokens,
                capacity=cap,
                version=meta.version,
                tick=meta.tick,
                session=cur.name,
                frames_present=tuple(visible),
                events_present=tuple(e.ref for e in shown),
                retrieved=retrieved(shown),
                encoding=previous.encoding,
            )
    runtime_text, total, cap = settle(r.tokenizer, base, runtime)
    if total - previous.tokens > full_uncached:
        return None
    content = body + "\n\n" + runtime_text if runtime_text else body
    return CompiledInput(
        messages=(*msgs, {"role": "user", "content": content}),
        tokens=total,
        prefix_tokens=previous.tokens,
        capacity=cap,
        version=meta.version,
        tick=meta.tick,
        session=cur.name,
        frames_present=tuple(visible),
        events_present=tuple(e.ref for e in shown),
        retrieved=retrieved(shown),
        encoding="delta",
    )
