"""The search filters: one check of their arguments, one decision per document.

:func:`make_filter` takes the filter arguments of
:meth:`storage.search.LexicalIndex.search` (and of the vector search, which
takes the same) and refuses bad values with typed errors (``bad_kind``,
``bad_lifecycle``, ``bad_trust``, ``bad_time``, ``bad_prefix``,
:class:`~protocol.errors.OutOfRange`). :meth:`SearchFilter.accepts` decides a
document from its fields (:class:`FilterFields`): a frame's time is its last
write; events have no envelope and pass the trust and valid-time filters. The
lexical ranking applies the same filter to its packed records in codes
(:mod:`storage.search.ranking`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.errors import OutOfRange, RequestError
from protocol.recall import trust_filter, valid_at_seconds
from storage.search.format import KINDS, LIFECYCLES


class FilterFields(Protocol):
    """What a filter reads of a document."""

    @property
    def is_frame(self) -> bool: ...
    @property
    def kind(self) -> str: ...
    @property
    def lifecycle(self) -> str: ...
    @property
    def time(self) -> float: ...
    @property
    def id(self) -> str: ...
    @property
    def trust(self) -> str | None: ...
    @property
    def valid_from(self) -> float: ...
    @property
    def valid_to(self) -> float: ...


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Which documents a search keeps (None: no condition on that field)."""

    kinds: frozenset[str] | None = None
    lifecycles: frozenset[str] | None = None
    since: float | None = None
    until: float | None = None
    id_prefix: str | None = None
    trusts: frozenset[str] | None = None
    valid_at: float | None = None

    @property
    def empty(self) -> bool:
        """True if every document passes."""
        return all(
            v is None
            for v in (
                self.kinds,
                self.lifecycles,
                self.since,
                self.until,
                self.id_prefix,
                self.trusts,
                self.valid_at,
            )
        )

    def accepts(self, rec: FilterFields) -> bool:
        """True if the document *rec* passes every condition."""
        frame = rec.is_frame
        if self.kinds is not None and ("frame" if frame else rec.kind) not in self.kinds:
            return False
        if self.lifecycles is not None and rec.lifecycle not in self.lifecycles:
            return False
        if self.since is not None and rec.time < self.since:
            return False
        if self.until is not None and rec.time > self.until:
            return False
        if self.id_prefix and not rec.id.startswith(self.id_prefix):
            return False
        if not frame:
            return True  # events have no envelope: trust and valid time do not apply
        if self.trusts is not None and rec.trust not in self.trusts:
            return False
        return self.valid_at is None or rec.valid_from <= self.valid_at < rec.valid_to


def _names(value: Any) -> set[str]:
    """The names of a ``kinds`` or ``lifecycle`` filter: one string, or a list of them
    (anything else is no name, and is refused by the caller as unknown)."""
    if isinstance(value, str):
        return {value}
    if not isinstance(value, (list, tuple, set, frozenset)):
        return {f"({type(value).__name__})"}
    return {v if isinstance(v, str) else f"({type(v).__name__})" for v in value}


def make_filter(
    kinds: Iterable[str] | str | None = None,
    lifecycle: Iterable[str] | str | None = None,
    since: float | None = None,
    until: float | None = None,
    id_prefix: str | None = None,
    trust: Iterable[str] | str | None = None,
    valid_at: float | str | None = None,
) -> SearchFilter:
    """The filter of a search's arguments, checked like the lexical search checks them."""
    trusts: frozenset[str] | None = None
    if trust is not None:
        trusts = frozenset(
            trust_filter(tuple(trust) if isinstance(trust, (set, frozenset)) else trust)
        )
    at = None if valid_at is None else valid_at_seconds(valid_at)
    for name, value in (("since", since), ("until", until)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OutOfRange(f"{name} is seconds since the epoch, not {type(value).__name__}")
        # An int is compared as it is (never turned into a float, which overflows past
        # 1e308): one outside the 64-bit range is refused rather than converted.
        if isinstance(value, int) and not -(1 << 63) <= value < 1 << 63:
            raise OutOfRange(f"{name} is seconds since the epoch, not an integer that large")
        if isinstance(value, float) and math.isnan(value):
            raise OutOfRange(f"{name} is seconds since the epoch, not nan")
    if since is not None and until is not None and since > until:
        raise OutOfRange(f"since ({since}) is after until ({until})")
    kind_set: frozenset[str] | None = None
    if kinds is not None:
        names = _names(kinds)
        unknown = sorted(str(n) for n in names - set(KINDS))
        if unknown or not names:
            raise RequestError(
                f"unknown kind {', '.join(unknown) or '(none given)'}; use {', '.join(KINDS)}",
                code="bad_kind",
            )
        kind_set = frozenset(names)
    life_set: frozenset[str] | None = None
    if lifecycle is not None:
        names = _names(lifecycle)
        unknown = sorted(str(n) for n in names - set(LIFECYCLES))
        if unknown or not names:
            raise RequestError(
                f"unknown lifecycle {', '.join(unknown) or '(none given)'}; "
                f"use {', '.join(LIFECYCLES)}",
                code="bad_lifecycle",
            )
        life_set = frozenset(names)
    if id_prefix is not None and not isinstance(id_prefix, str):
        raise RequestError("an id prefix is a string", code="bad_prefix")
    return SearchFilter(
        kinds=kind_set,
        lifecycles=life_set,
        since=None if since is None else float(since),
        until=None if until is None else float(until),
        id_prefix=id_prefix or None,
        trusts=trusts,
        valid_at=at,
    )
