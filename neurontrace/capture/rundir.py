"""Run folders appear complete or not at all.

A capture writes into a hidden staging folder beside ``--out`` and renames it into place
when the capture is done; a failed or interrupted capture leaves nothing at ``--out``.
An existing run folder at ``--out`` is replaced; anything else there is refused.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime
from pathlib import Path

from neurontrace.capture import manifest
from neurontrace.errors import BadInput
from neurontrace.io import atomic


def default_out(workload: str) -> Path:
    return Path("runs") / f"{workload}-{datetime.now():%Y%m%d-%H%M%S}"


def check_target(out: Path) -> None:
    """Refuse to replace what is not an earlier run folder."""
    if not out.exists():
        return
    if not out.is_dir():
        raise BadInput(f"--out {out}: exists and is not a folder")
    if any(out.iterdir()) and not (out / manifest.NAME).is_file():
        raise BadInput(f"--out {out}: a non-empty folder that is not a capture run folder "
                       f"(no {manifest.NAME}); choose another --out")


def stage(out: Path) -> Path:
    check_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prefix = atomic.hidden_name(out.name, "capture-", room=8)  # mkdtemp adds 8
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent)).resolve()
    # mkdtemp's 0700 would stay on the published folder
    staging.chmod(0o777 & ~atomic.current_umask())
    return staging


def publish(staging: Path, out: Path) -> None:
    check_target(out)
    atomic.replace_dir(staging, out)


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
