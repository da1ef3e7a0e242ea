"""The load test's nemeses as ``morphz loadtest`` offers them: each declared once.

:data:`NEMESES` lists them; :func:`nemesis_options` makes each one's two options
(``--<every_flag> N --<for_flag> S``) and their help; :func:`nemesis_from` turns what
was given into the load test's ``nemesis`` option (``{kind, every_s, for_s}``). What a
nemesis does is ``harness.loadtest.nemeses.FAULTS[name]``, kept out of the command
line's modules, which must not import the harness before a command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

__all__ = ["NEMESES", "Nemesis", "nemesis_from", "nemesis_options"]


@dataclass(frozen=True)
class Nemesis:
    """One nemesis of the load test as the command line offers it (see the module doc)."""

    name: str
    every_flag: str
    for_flag: str
    does: str
    """What each fault does, completing "every N seconds, …"."""
    unit: str
    """What one fault is called."""


NEMESES: tuple[Nemesis, ...] = (
    Nemesis(
        "pause",
        "pause-primary-every",
        "pause-for",
        "pause (SIGSTOP) a replicated context's primary",
        "pause",
    ),
    Nemesis(
        "partition",
        "partition-every",
        "partition-for",
        "cut a replicated context's primary off from its followers and the supervisor",
        "partition",
    ),
)
"""Every nemesis ``morphz loadtest`` offers (docs/loadtest.md)."""


def nemesis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the two options of each of :data:`NEMESES` to *command* (parameters
    ``<name>_every`` and ``<name>_for``)."""
    for n in reversed(NEMESES):
        command = click.option(
            f"--{n.for_flag}",
            f"{n.name}_for",
            type=click.FloatRange(min=0, min_open=True),
            default=3.0,
            show_default=True,
            help=f"Seconds each {n.unit} lasts.",
        )(command)
        command = click.option(
            f"--{n.every_flag}",
            f"{n.name}_every",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help=f"Start a test cluster and {n.does} every N seconds, for --{n.for_flag} "
            "seconds (harness/loadtest/nemeses.py).",
        )(command)
    return command


def nemesis_from(faults: Mapping[str, float | None]) -> dict[str, Any] | None:
    """The load test's ``nemesis`` option from the nemesis options given (one at most)."""
    given = [n for n in NEMESES if faults.get(f"{n.name}_every") is not None]
    if len(given) > 1:
        raise click.UsageError("give one of " + ", ".join(f"--{n.every_flag}" for n in NEMESES))
    if not given:
        return None
    n = given[0]
    return {"kind": n.name, "every_s": faults[f"{n.name}_every"], "for_s": faults[f"{n.name}_for"]}
