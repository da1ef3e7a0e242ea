"""Compiled model inputs with a cache per session and compiler configuration.

A :class:`~protocol.compiler.Compiler` caches what it read and rendered, so the
next compile of the same session reads only what changed. :class:`CompilerCache`
keeps one compiler per ``(session, configuration)`` (at most
:data:`MAX_COMPILERS`, oldest dropped first), so every agent thread of a
session shares its render cache, whichever port it comes through. A cached
compile gives the same input a fresh compiler would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from protocol.compiler import Compiler, CompilerConfig
from protocol.errors import RequestError
from protocol.turns import CompiledInput
from protocol.view import ReadView
from service.protocol_text import PROTOCOL_TEXT
from service.registry import Session

if TYPE_CHECKING:
    from service.context import Context

T = TypeVar("T")

MAX_COMPILERS = 64
"""Most (session, configuration) compilers one context keeps (oldest dropped first)."""


def compile_args(config: Any, previous: Any) -> tuple[CompilerConfig, CompiledInput | None]:
    """A compile request's configuration and previous input, validated from plain dicts.

    Models pass through. A :class:`RequestError` names the first problem.
    """
    from pydantic import ValidationError

    try:
        cfg = CompilerConfig.model_validate(config or {})
        prev = None if previous is None else CompiledInput.model_validate(previous)
    except ValidationError as e:
        raise RequestError(f"bad compile request: {e.errors()[0].get('msg')}") from e
    return cfg, prev


class CompilerCache:
    """One :class:`~protocol.compiler.Compiler` per (session, configuration); not thread-safe."""

    def __init__(self, limit: int = MAX_COMPILERS) -> None:
        self._limit = max(1, limit)
        self._compilers: dict[tuple[str, str], Compiler] = {}

    def compiler(self, session: str, config: CompilerConfig) -> Compiler:
        """The compiler of *session* under *config*, made on first use."""
        key = (session, config.model_dump_json())
        found = self._compilers.get(key)
        if found is None:
            if len(self._compilers) >= self._limit:
                self._compilers.pop(next(iter(self._compilers)))
            found = self._compilers[key] = Compiler(config, protocol_text=PROTOCOL_TEXT)
        return found

    def compile(
        self,
        read: Callable[[Callable[[ReadView], CompiledInput]], CompiledInput],
        session: str,
        config: CompilerConfig | None = None,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """The model input for *session*, compiled on one snapshot that *read* runs.

        See :meth:`protocol.compiler.Compiler.compile` (RequestError
        ``maintenance_cannot_fit`` when nothing fits the budget).
        """
        compiler = self.compiler(session, config or CompilerConfig())
        return read(
            lambda v: compiler.compile(v, session=session, previous=previous, overflow=overflow)
        )

    def clear(self) -> None:
        """Drop every cached compiler."""
        self._compilers.clear()


def compile_input(
    ctx: Context,
    session: Session,
    config: CompilerConfig | None = None,
    previous: CompiledInput | None = None,
    overflow: bool = False,
) -> CompiledInput:
    """The model input for *session* (R35-R37), compiled on one snapshot.

    One compiler per session and *config* is kept (its render cache serves every
    later compile of that session, through any port; the input is the one a fresh
    compiler would give). *previous* is the input compiled for the call before
    (hysteresis, ContextDelta); *overflow* says the model refused it as too long.
    See :meth:`protocol.compiler.Compiler.compile`.
    """
    return ctx._compilers.compile(ctx.backend.read, session, config, previous, overflow)
