"""Shared plumbing of the ``morphz`` commands: options object, output, typed-error exits."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from protocol.errors import MorphzError, ParseError, WireError

EXIT_REFUSED = 1
EXIT_USAGE = 2


class Env:
    """The global options: store directory, context name, JSON output."""

    def __init__(self, store: str, context: str, as_json: bool) -> None:
        self.store = store
        self.context = context
        self.as_json = as_json

    def open(self, **options: Any) -> Any:
        """Open (creating on first use) this command's context."""
        from service.store import Store

        return Store(self.store).open(self.context, **options)

    def read(self) -> Any:
        """Open this command's context for reading: read-only (no writer lock) if it exists.

        A read command therefore works while another process (a context actor,
        a running agent) holds the context for writing.
        """
        from service.store import Store

        store = Store(self.store)
        if store.exists(self.context):
            return store.open(self.context, readonly=True)
        return store.open(self.context)


def emit(env: Env, doc: Any, human: Callable[[Any], str]) -> None:
    """Print *doc* as one JSON document with ``--json``, else its human rendering."""
    if env.as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
    else:
        click.echo(human(doc))


def fail(
    env: Env | None, err: MorphzError, usage: Callable[[MorphzError], bool] | None = None
) -> NoReturn:
    """Report a typed error and exit: 2 for parse/wire errors (and what *usage* says is a
    wrong command line), 1 for refusals."""
    bad_input = isinstance(err, (ParseError, WireError)) or (usage is not None and usage(err))
    code = EXIT_USAGE if bad_input else EXIT_REFUSED
    if env is not None and env.as_json:
        click.echo(json.dumps(err.to_dict(), ensure_ascii=False))
    else:
        click.echo(f"morphz: {err.code}: {err.message}", err=True)
    sys.exit(code)


def decode(data: bytes, what: str) -> str:
    """UTF-8 text from bytes; invalid input is a parse error (exit 2), never a traceback."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{what} is not valid UTF-8 (byte {e.start})") from e


def run_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Translate the library's typed errors into the documented exit codes."""
    return failing_as_usage(None)(fn)


def failing_as_usage(
    usage: Callable[[MorphzError], bool] | None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """:func:`run_command` for commands where *usage* marks more errors as a wrong command
    line (exit 2), e.g. a bad argument value named on it."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            env = click.get_current_context().find_object(Env)
            try:
                fn(*args, **kwargs)
            except MorphzError as e:
                fail(env, e, usage)

        return wrapper

    return decorate
