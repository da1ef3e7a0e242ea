"""The project explains itself: requirement ids resolve in docs/requirements.md, and the
files the architecture, language and requirements pages name exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ("protocol", "storage", "adapters", "service", "actors", "agents", "harness", "morphz")
REQUIREMENTS = ROOT / "docs" / "requirements.md"
R_ID = re.compile(r"\bR([0-9]{1,2})\b")
TOP_LEVEL = (*RUNTIME, "tests", "docs", "examples", "benchmarks")
CITED_PATH = re.compile(r"`((?:" + "|".join(TOP_LEVEL) + r")/[\w./-]*)`")


def listed_ids() -> list[int]:
    """The ids of docs/requirements.md, in the order of their lines ``- **Rn** …``."""
    text = REQUIREMENTS.read_text(encoding="utf-8")
    return [int(n) for n in re.findall(r"^- \*\*R([0-9]{1,2})\*\* ", text, re.M)]


def cited_ids() -> dict[int, str]:
    """Every requirement id the runtime packages mention (comments, docstrings, help
    texts), with one file that mentions it."""
    found: dict[int, str] = {}
    for package in RUNTIME:
        for path in sorted((ROOT / package).rglob("*.py")):
            for n in R_ID.findall(path.read_text(encoding="utf-8")):
                found.setdefault(int(n), str(path.relative_to(ROOT)))
    return found


def test_requirements_are_listed_once_in_order() -> None:
    ids = listed_ids()
    assert ids == list(range(1, len(ids) + 1))


def test_every_cited_requirement_resolves() -> None:
    listed = set(listed_ids())
    missing = {f"R{n}": where for n, where in cited_ids().items() if n not in listed}
    assert missing == {}


def test_the_cli_help_cites_only_listed_requirements() -> None:
    from click.testing import CliRunner

    from morphz.cli import cli

    listed = set(listed_ids())
    runner = CliRunner()
    texts = [runner.invoke(cli, ["--help"]).output]
    texts += [runner.invoke(cli, [name, "--help"]).output for name in sorted(cli.commands)]
    assert {int(n) for t in texts for n in R_ID.findall(t)} <= listed


@pytest.mark.parametrize("page", ["architecture.md", "language.md", "requirements.md"])
def test_every_file_a_page_names_exists(page: str) -> None:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    named = sorted(set(CITED_PATH.findall(text)))
    assert named, page
    assert [p for p in named if not (ROOT / p.rstrip("/")).exists()] == []
