"""pytest fixtures; plain helpers live in support.py (importable from any test folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import corpus_dir


@pytest.fixture
def corpus() -> Path:
    path = corpus_dir()
    if path is None:
        pytest.skip("NEURONTRACE_CORPUS is not set to a folder of real Kineto traces")
    return path
