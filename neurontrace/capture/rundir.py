"""Run folders appear complete or not at all.

A capture writes into a hidden staging folder beside ``--out`` and renames it into place
when the capture is done; a failed or interrupted capture leaves nothing at ``--out``.
An existing run folder at ``--out`` is replaced; anything else there is refused.
"""

from __future__ import annotations

import shutil
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


#: Folders :func:`stage` made above each staging folder (outermost first), for
#: :func:`discard` to remove.
_made: dict[Path, list[Path]] = {}


def stage(out: Path) -> Path:
    check_target(out)
    made = atomic.make_parent(out)
    try:
        staging = atomic.new_temporary(out.parent, out.name, "capture-", folder=True).resolve()
    except OSError as e:
        atomic.remove_empty(made)
        raise atomic.cannot_write(out, e) from None
    _made[staging] = made
    return staging


def publish(staging: Path, out: Path) -> None:
    check_target(out)
    atomic.replace_dir(staging, out)
    _made.pop(staging, None)


def discard(staging: Path) -> None:
    """Remove ``staging``, and the folders :func:`stage` made for it if they are empty."""
    shutil.rmtree(staging, ignore_errors=True)
    atomic.remove_empty(_made.pop(staging, []))
