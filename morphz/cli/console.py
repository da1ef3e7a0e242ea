"""Shared plumbing of the ``morphz`` commands: options object, output, typed-error exits.

The exit-code contract (README, ``docs/cli.md``): 0 success; 1 refused,
rejected, not found, locked or unreachable; 2 usage or malformed input (bad
JSON, bad option value, parse error, unknown field, a bad reference); 130
interrupted. With ``--json`` every error is one JSON object on stdout:
``{"error": {"code": …, "message": …}}``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TextIO

import click

from protocol.errors import MorphzError, ParseError, StoreLocked, WireError
from protocol.replies import plain

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

NOT_BAD_INPUT = frozenset({"bad_output"})
"""``bad_*`` codes that are not about the input (a file that cannot be written)."""


class Env:
    """The global options: store directory, context name, JSON output."""

    def __init__(self, store: str, context: str, as_json: bool) -> None:
        self.store = store
        self.context = context
        self.as_json = as_json

    def open(self, *, create: bool = False, **options: Any) -> Any:
        """Open this command's context for writing.

        Never creates it unless *create* (``morphz init``, or a write given
        ``--create``): a missing context raises NotFound naming the contexts
        that exist.
        """
        from service.store import Store

        return Store(self.store).open(self.context, create=create, **options)

    def read(self) -> Any:
        """Open this command's context read-only (no writer lock); never creates it.

        A read command therefore works while another process (a context actor,
        a running agent) holds the context for writing, and a mistyped
        ``--store`` or ``--context`` is a ``not_found`` error, never an empty state.
        """
        from service.store import Store

        return Store(self.store).open(self.context, readonly=True)


_results: TextIO | None = None
"""With ``--json``, the real stdout, kept for the command's JSON documents alone."""


@contextlib.contextmanager
def results_only_on_stdout(as_json: bool) -> Iterator[None]:
    """With ``--json``, stdout carries the command's JSON documents and nothing else.

    For the command's duration whatever else writes to ``sys.stdout`` goes to stderr:
    Ray's driver prints its raylets' warnings (worker start-up, actor restarts of any
    job) on ``sys.stdout`` from a thread of its own, whatever ``log_to_driver`` says.
    """
    global _results
    if not as_json:
        yield
        return
    saved, _results = _results, sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout, _results = _results, saved


def print_json(doc: Any) -> None:
    """Write *doc* as one line of JSON on the command's stdout."""
    click.echo(json.dumps(doc, ensure_ascii=False), file=_results or sys.stdout)


def emit(env: Env, doc: Any, human: Callable[[Any], str]) -> None:
    """Print *doc* as one JSON document with ``--json``, else its human rendering."""
    if env.as_json:
        print_json(plain(doc))
    else:
        click.echo(human(doc))


def is_bad_input(err: MorphzError) -> bool:
    """True if *err* means the input itself was malformed (exit 2), not refused (exit 1).

    Parse and wire errors, numbers outside their documented bounds
    (``out_of_range``) and every ``bad_*`` code (bad argument, bad reference,
    bad context name …) are bad input. A version the context has not reached
    (``future_version``) is refused, like ``not_found``: the same request can
    succeed later.
    """
    if isinstance(err, (ParseError, WireError)) or err.code == "out_of_range":
        return True
    return err.code.startswith("bad_") and err.code not in NOT_BAD_INPUT


def error_doc(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one JSON shape of an error: ``{"error": {"code", "message", …}}``."""
    return {"error": {"code": code, "message": message, **extra}}


def report_error(as_json: bool, code: str, message: str, **extra: Any) -> None:
    """Print an error: one JSON object on stdout with ``--json``, else one line on stderr."""
    if as_json:
        print_json(error_doc(code, message, **extra))
    else:
        click.echo(f"morphz: {code}: {message}", err=True)


def fail(
    env: Env | None, err: MorphzError, usage: Callable[[MorphzError], bool] | None = None
) -> NoReturn:
    """Report a typed error and exit: 2 for bad input (:func:`is_bad_input`, and what
    *usage* says is a wrong command line), 1 for refusals."""
    bad_input = is_bad_input(err) or (usage is not None and usage(err))
    extra = {k: v for k, v in err.to_dict().items() if k not in ("error", "message")}
    message = err.message
    if isinstance(err, StoreLocked) and env is not None and "context actor" not in message:
        from morphz.cli.holder import holder_note

        message = holder_note(env.store, env.context, message)
    report_error(env is not None and env.as_json, err.code, message, **extra)
    sys.exit(EXIT_USAGE if bad_input else EXIT_REFUSED)


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
