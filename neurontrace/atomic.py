"""Swapping a finished folder into place, so that readers never see a half-written one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def replace_dir(tmp: Path, dst: Path) -> None:
    """Move the complete folder ``tmp`` to ``dst``, replacing whatever folder is there."""
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
        os.replace(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, dst)
