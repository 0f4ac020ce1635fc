"""Helpers shared by the capture tests: run the command, read what it wrote."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner, Result

import neurontrace
from neurontrace import schema as S
from neurontrace.cli.main import cli

# torch's own start-up noise on a machine without numpy or a PrivateUse1 backend.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
warnings.filterwarnings("ignore", message="The privateuseone is not a valid device option")

#: Small enough that the whole CPU study (torch.compile included) takes seconds.
SHAPE = "2x16x64"
STEPS = 3


def capture(*args: str, ok: bool = True) -> Result:
    """Run ``neurontrace capture ARGS`` in-process; fail the test if it did not succeed."""
    result = CliRunner().invoke(cli, ["capture", *args])
    if ok and result.exit_code != 0:
        pytest.fail(f"capture exited {result.exit_code}:\n{result.output}\n{result.exception!r}")
    return result


def manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return data


def events(path: Path) -> pl.DataFrame:
    """The event table of a trace file, or of a converted Parquet file or folder."""
    if path.suffix == ".parquet" or path.is_dir():
        return neurontrace.scan(path).collect()
    return pl.from_arrow(neurontrace.load(path))  # type: ignore[return-value]


def step_names(df: pl.DataFrame) -> list[str]:
    return sorted(df.filter(pl.col(S.NAME).str.starts_with("ProfilerStep#"))[S.NAME].to_list())


def count(df: pl.DataFrame, name: str) -> int:
    return df.filter((pl.col(S.NAME) == name) & pl.col(S.STEP).is_not_null()).height
