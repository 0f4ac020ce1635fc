"""The README documents `neurontrace capture`: its heading and every option."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace.cli.capture import capture

README = Path(__file__).parents[2] / "README.md"


def capture_section() -> str:
    text = README.read_text()
    assert "\n## Capture\n" in text
    return text.split("\n## Capture\n", 1)[1]


def test_the_readme_has_the_capture_reference_heading():
    heading = "\n### `neurontrace capture [--workload rmsnorm|FILE.py] [--device "
    assert heading in README.read_text()


def test_every_capture_option_is_documented():
    section = capture_section()
    for param in capture.params:
        if isinstance(param, click.Option):
            names = param.opts + param.secondary_opts
            assert any(f"`{o}" in section or f"/{o}`" in section for o in names), names


def test_the_exit_codes_are_documented():
    section = capture_section()
    for code in ("0 success", "2 bad input", "3 the workload failed", "1 a bug"):
        assert code in section, code
