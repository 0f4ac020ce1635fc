"""pytest fixtures; plain helpers live in support.py (importable from any test folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support import corpus_dir


@pytest.fixture
def corpus() -> Path:
    path = corpus_dir()
    if path is None:
        pytest.skip("NEURONTRACE_CORPUS is not set to a folder of real Kineto traces")
    return path


# Commands convert a raw trace once into a cache in the user's cache folder (issue 18);
# the suite never writes there, and reads each raw input afresh: tests/test_ergonomics.py
# turns the cache on, in a folder of its own, where it is the subject.
os.environ["NEURONTRACE_CACHE"] = "off"
