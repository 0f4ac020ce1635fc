"""The wheel holds every package: pyproject.toml lists them by hand (``cli/`` is installed
as ``neurontrace.cli``), and an editable install (the tests' own) would not notice one
missing: ``neurontrace.analyses.advice`` was, so ``advise`` failed from a wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_of_the_tree_is_in_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "neurontrace").rglob("__init__.py")}
    found |= {"neurontrace.cli." + ".".join(p.parent.relative_to(ROOT / "cli").parts)
              for p in (ROOT / "cli").rglob("__init__.py") if p.parent != ROOT / "cli"}
    found.add("neurontrace.cli")
    assert found - listed == set()
    assert listed - found == set()


def test_ruff_and_mypy_check_against_the_oldest_python_the_package_accepts() -> None:
    """The floor of ``requires-python`` is what lint checks: 3.10 was claimed while the
    JSON lexer's possessive regexes need 3.11, and nothing noticed."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    major, minor = conf["project"]["requires-python"].removeprefix(">=").split(".")
    assert conf["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    assert conf["tool"]["mypy"]["python_version"] == f"{major}.{minor}"
