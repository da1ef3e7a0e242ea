"""How a LangGraph item is laid out in a frame body, and the edits of one ``put``.

An item is a keyed body (docs/language.md, "Fields")::

    (item (namespace "a" "b") (key "k") (created-at "2026-…"))
    (updated-at "2026-…")
    (v:colour "colour" "\\"blue\\"")
    (v:size "size" "3")

one field ``v:…`` per key of the value, holding the key and its value as JSON, so a
``put`` that changes some keys is a ``set`` of those fields (and an ``unset`` of the
keys it drops): two writers changing different keys of one item both commit, and two
changing the same key collide on that field. ``updated-at`` is written with ``append``
and ``remove`` (the stamps the writer saw), which never collide; the latest stamp is
the item's. Items written before this layout, ``(item … (updated-at …)) (value "…")``,
still read, and their next ``put`` rewrites them in this one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langgraph.store.base import Item

from protocol.forms import Symbol, from_plain
from protocol.tx import AppendField, RemoveField, SetField, UnsetField

KEY_FIELD_PREFIX = "v:"
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_PLAIN_KEY = 64
"""Longest key written as itself in its field name; longer or other keys are hashed."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether *text* holds a lone surrogate (which a body string cannot)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def key_field(key: str) -> str:
    """The field name that holds value key *key*."""
    if key and len(key) <= _PLAIN_KEY and all(ch in _PLAIN for ch in key):
        return KEY_FIELD_PREFIX + key
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"{KEY_FIELD_PREFIX}.h{digest}"


def value_json(value: Any) -> str:
    """One key's value as the JSON text its field holds (keys sorted: equal values, equal
    text; a lone surrogate escaped, as a body string cannot hold one)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, sort_keys=True)
    if has_surrogate(text):
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, sort_keys=True)
    return text


def fits_fields(value: dict[str, Any]) -> bool:
    """Whether *value* can be laid out one field per key (no key holds a lone surrogate);
    otherwise the item keeps the whole-value layout."""
    return not any(has_surrogate(k) for k in value)


def item_body(
    namespace: tuple[str, ...], key: str, value: dict[str, Any], created: str, updated: str
) -> tuple[Any, ...]:
    """The whole body of an item (a ``derive``, or the ``revise`` of an old-layout item)."""
    head = (
        Symbol("item"),
        (Symbol("namespace"), *namespace),
        (Symbol("key"), key),
        (Symbol("created-at"), created),
    )
    fields = [head, (Symbol("updated-at"), updated)]
    fields += [(Symbol(key_field(k)), k, value_json(v)) for k, v in value.items()]
    return tuple(fields)


@dataclass(frozen=True)
class Decoded:
    """An item read back from a frame body."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: str
    updated_at: str
    stamps: tuple[str, ...] = ()
    """The ``updated-at`` stamps the body holds (empty for the old layout)."""
    keyed: bool = False
    """True for the layout of this module (field edits apply), False for the old one."""
    texts: Mapping[str, str] = field(default_factory=dict)
    """Each value key's JSON text as its field holds it (a ``put`` compares against these
    instead of encoding the old value again); empty when not known."""

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=datetime.fromisoformat(self.created_at),
            updated_at=datetime.fromisoformat(self.updated_at),
        )


def _texts(values: Any) -> bool:
    return all(isinstance(s, str) and not isinstance(s, Symbol) for s in values)


def decode_item(body_forms: list[Any]) -> Decoded | None:
    """The item a frame body (its plain forms) holds, or None when it is not an item."""
    try:
        forms = [from_plain(f) for f in body_forms]
        head = forms[0]
        if head[0] != "item":
            return None
        meta = {str(f[0]): f[1:] for f in head[1:]}
        namespace = tuple(meta["namespace"])
        (key,) = meta["key"]
        (created,) = meta["created-at"]
        if not _texts((*namespace, key, created)):
            return None
        if "updated-at" in meta:  # the old layout: (item … (updated-at T)) (value "json")
            (updated,) = meta["updated-at"]
            (value,) = forms[1:]
            if value[0] != "value" or len(value) != 2 or not _texts((updated, value[1])):
                return None
            parsed = json.loads(value[1])
            if not isinstance(parsed, dict):
                return None
            return Decoded(namespace, key, parsed, created, updated)
        stamps: tuple[str, ...] = ()
        out: dict[str, Any] = {}
        texts: dict[str, str] = {}
        for f in forms[1:]:
            name = str(f[0])
            if name == "updated-at":
                stamps = tuple(f[1:])
            elif name.startswith(KEY_FIELD_PREFIX) and len(f) == 3 and _texts(f[1:]):
                out[f[1]] = json.loads(f[2])
                texts[f[1]] = f[2]
            else:
                return None
        if not stamps or not _texts(stamps):
            return None
        return Decoded(namespace, key, out, created, max(stamps), stamps, True, texts)
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _old_text(old: Decoded, key: str) -> str:
    """Value key *key*'s JSON text in item *old*: as its field held it, or encoded now."""
    text = old.texts.get(key)
    return value_json(old.value[key]) if text is None else text


def put_edits(
    fid: str, old: Decoded, value: dict[str, Any], now: str
) -> tuple[SetField | UnsetField | AppendField | RemoveField, ...]:
    """The field edits that turn item *old* (as read) into one holding *value*, at *now*."""
    ops: list[SetField | UnsetField | AppendField | RemoveField] = []
    for k, v in value.items():
        text = value_json(v)
        if k not in old.value or _old_text(old, k) != text:
            ops.append(SetField(id=fid, field=key_field(k), values=(k, text)))
    for k in old.value:
        if k not in value:
            ops.append(UnsetField(id=fid, field=key_field(k)))
    if old.stamps:
        ops.append(RemoveField(id=fid, field="updated-at", values=old.stamps))
    ops.append(AppendField(id=fid, field="updated-at", values=(now,)))
    return tuple(ops)
