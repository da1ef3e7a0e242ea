"""Field edits held against the final state, for the history checker (``lost_edit``).

Each frame that a logged ``set``, ``append``, ``remove``, ``incr`` or ``unset``
edited is rebuilt here from the log alone: its body from the last ``derive`` or
``revise``, then every logged edit applied in version order by the simple rules
of docs/language.md, written again here rather than taken from the engine. The
frame's final state must hold exactly those fields and values; an ``append`` lost
or applied twice shows as a value missing or extra (``lost_edit``).

A frame whose body cannot be followed (not keyed, or written by something other
than a logged model transaction) is not checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from harness.checker.verdicts import LOST_EDIT, Violation
from protocol.forms import Symbol
from protocol.sexpr import print_form
from protocol.state import Frame
from protocol.tx import ContextTx, Derive, FieldOp, Revise


def _key(form: Any) -> Any:
    if isinstance(form, tuple):
        return ("list", tuple(_key(x) for x in form))
    return (type(form).__name__, form if not isinstance(form, Symbol) else str(form))


def _fields(body: tuple[Any, ...]) -> dict[str, list[Any]] | None:
    out: dict[str, list[Any]] = {}
    for form in body:
        if not (isinstance(form, tuple) and form and isinstance(form[0], Symbol)):
            return None
        if str(form[0]) in out:
            return None
        out[str(form[0])] = list(form[1:])
    return out


def _apply(fields: dict[str, list[Any]], op: FieldOp) -> None:
    name, values = op.field, list(op.values)
    if op.op == "set":
        fields[name] = values
    elif op.op == "append":
        fields.setdefault(name, []).extend(values)
    elif op.op == "remove":
        gone = {_key(v) for v in values}
        if name in fields:
            fields[name] = [v for v in fields[name] if _key(v) not in gone]
    elif op.op == "incr":
        held = fields.get(name, [0])
        if len(held) == 1 and type(held[0]) is int:
            fields[name] = [held[0] + values[0]]
    elif op.op == "unset":
        fields.pop(name, None)


def check_field_edits(
    records: Mapping[int, Mapping[str, Any]],
    txs: Mapping[int, ContextTx],
    final_frames: list[Frame],
    out: list[Violation],
) -> None:
    """Report every edited frame whose final fields differ from its logged edits."""
    model: dict[str, dict[str, list[Any]] | None] = {}
    edited: set[str] = set()
    for version in sorted(txs):
        for op in txs[version].ops:
            if isinstance(op, (Derive, Revise)):
                model[op.id] = _fields(op.body)
            elif isinstance(op, FieldOp):
                fields = model.get(op.id)
                if fields is None:
                    model[op.id] = None
                    continue
                _apply(fields, op)
                edited.add(op.id)
    finals = {f.id: f for f in final_frames}
    for fid in sorted(edited):
        expected, final = model.get(fid), finals.get(fid)
        if expected is None or final is None:
            continue
        got = _fields(final.body)
        if got is None:
            out.append(Violation(kind=LOST_EDIT, detail=f"frame {fid} lost its fields"))
            continue
        for name in sorted(expected.keys() | got.keys()):
            want = Counter(_key(v) for v in expected.get(name, []))
            have = Counter(_key(v) for v in got.get(name, []))
            if name in expected and name in got and want == have:
                if [_key(v) for v in expected[name]] == [_key(v) for v in got[name]]:
                    continue
            missing = list((want - have).elements())
            extra = list((have - want).elements())
            detail = f"field {name} of frame {fid}: "
            if name not in got:
                detail += "missing from the final state"
            elif name not in expected:
                detail += "in the final state, but no logged edit made it"
            elif missing or extra:
                detail += f"{len(missing)} value(s) lost, {len(extra)} extra or applied twice"
                shown = [print_form(_unkey(k)) for k in (missing + extra)[:3]]
                detail += f" (e.g. {', '.join(shown)})"
            else:
                detail += "values out of commit order"
            out.append(Violation(kind=LOST_EDIT, detail=detail))


def _unkey(key: Any) -> Any:
    kind, value = key
    if kind == "list":
        return tuple(_unkey(k) for k in value)
    if kind == "Symbol":
        return Symbol(value)
    return value
