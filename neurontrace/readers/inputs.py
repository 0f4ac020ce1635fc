"""Which traces the inputs of a conversion hold: files, folders walked, and inputs
that a reader claims whole (a Neuron run folder) or expands into several sources.

Every input is checked before anything is read (a regular file or a folder; a FIFO,
socket or device is refused without being opened), and the same file or folder given
twice is read once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, UnknownFormat
from neurontrace.io import atomic
from neurontrace.readers import detect
from neurontrace.readers.base import Divisible, Source

PathLike = str | os.PathLike[str]


def _sources_of(path: Path, fmt: str | None, cache: Path) -> tuple[list[Source], bool]:
    """``path`` as the sources it holds (its reader's expansion, else itself), and
    whether its reader always writes a dataset folder (a run folder, one file per rank)."""
    reader = detect(path, fmt)
    expand = getattr(reader, "expand", None)
    if expand is not None:
        sources: list[Source] = expand(path, cache)
        return sources, bool(getattr(reader, "dataset", False))
    divisible = reader if isinstance(reader, Divisible) else None
    return [Source(path, reader.name, partial(reader.read, path), stem(path),
                   divisible=divisible)], False


def inputs_of(srcs: Sequence[PathLike], fmt: str | None, cache: Path,
              diag: Diagnostics) -> tuple[list[Source], list[Path], bool]:
    """Expand inputs into sources: (sources, skipped files, whether they make a dataset).

    A folder that a reader claims as a whole (a Neuron Explorer output, a run folder)
    is read by that reader; any other folder is walked (hidden entries skipped) and
    each file or claimed folder in it detected. An input must be a regular file or a
    folder: a FIFO, socket or device is refused without being opened (reading one could
    wait forever). The same input given twice (under another spelling, through a
    symlink or a hard link, or also inside a folder given) is read once. In a walked
    folder, an entry that cannot be followed (a dangling or looping symlink, no
    permission), that is neither a regular file nor a folder, or a folder already
    walked (a symlink back up the tree) is skipped with a warning in ``diag``.
    """
    found: list[Source] = []
    skipped: list[Path] = []
    given: dict[tuple[int, int], tuple[Path, os.stat_result]] = {}  # the first spelling
    for s in srcs:
        st = _stat_input(Path(s))
        given.setdefault((st.st_dev, st.st_ino), (Path(s), st))
    dataset = len(given) > 1
    walked: set[tuple[int, int]] = set()
    for p, st in given.values():
        if stat.S_ISDIR(st.st_mode) and not _claimed(p, fmt):
            dataset = True
            _walk(p, st, fmt, cache, found, skipped, diag, walked)
        else:
            expanded, always = _sources_of(p, fmt, cache)
            dataset = dataset or always or len(expanded) != 1
            found.extend(expanded)
    found = _distinct(found)
    if not found:
        raise BadInput(
            f"{', '.join(str(s) for s in srcs)}: no trace found"
            + (f" ({len(skipped)} file(s) of no known format)" if skipped else "")
        )
    return found, skipped, dataset


def _stat_input(p: Path) -> os.stat_result:
    """``p``'s status, when it is a regular file or a folder; else BadInput saying why."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.lexists(p):
            raise BadInput(f"{p}: a symlink to nothing (dangling)") from None
        raise BadInput(f"{p}: no such file or folder") from None
    except OSError as e:
        raise BadInput(f"{p}: cannot read ({atomic.reason(e)})") from None
    kind = atomic.special_kind(st.st_mode)
    if kind is not None:
        raise BadInput(f"{p}: is {kind}, not a regular file or folder; not read")
    return st


def _distinct(sources: list[Source]) -> list[Source]:
    """``sources`` without repeats: the same file or folder read as the same format."""
    kept: dict[object, Source] = {}
    for source in sources:
        try:
            st = os.stat(source.path)
            key: object = (st.st_dev, st.st_ino, source.format)
        except OSError:
            key = id(source)  # not known to be another's: kept
        kept.setdefault(key, source)
    return list(kept.values())


def _walk(folder: Path, st: os.stat_result, fmt: str | None, cache: Path,
          found: list[Source], skipped: list[Path], diag: Diagnostics,
          walked: set[tuple[int, int]]) -> None:
    """Add the sources of ``folder`` (whose status is ``st``) and of the folders in it
    to ``found``, its files of no known format to ``skipped`` (see :func:`inputs_of`)."""
    if (st.st_dev, st.st_ino) in walked:
        diag.warn("skipped_entry", f"{folder}: skipped (a folder already read: a symlink "
                  "loop, or given twice)")
        return
    walked.add((st.st_dev, st.st_ino))
    try:
        entries = sorted(folder.iterdir())
    except OSError as e:
        diag.warn("skipped_entry", f"{folder}: skipped ({atomic.reason(e)})")
        return
    for q in entries:
        if q.name.startswith("."):
            continue
        try:
            entry = os.stat(q)
        except FileNotFoundError:
            diag.warn("skipped_entry", f"{q}: skipped (a symlink to nothing)")
            continue
        except OSError as e:
            diag.warn("skipped_entry", f"{q}: skipped ({atomic.reason(e)})")
            continue
        kind = atomic.special_kind(entry.st_mode)
        if kind is not None:
            diag.warn("skipped_entry", f"{q}: skipped (is {kind}, not a regular file)")
            continue
        if stat.S_ISDIR(entry.st_mode) and not _claimed(q, fmt):
            _walk(q, entry, fmt, cache, found, skipped, diag, walked)
            continue
        try:
            found.extend(_sources_of(q, fmt, cache)[0])
        except UnknownFormat:
            skipped.append(q)
        except OSError as e:
            diag.warn("skipped_entry", f"{q}: skipped ({atomic.reason(e)})")


def _claimed(folder: Path, fmt: str | None) -> bool:
    """Whether a reader (the one ``fmt`` names, else any) reads ``folder`` as a whole."""
    try:
        reader = detect(folder, fmt)
    except UnknownFormat:
        return False
    return fmt is None or reader.sniff(folder, b"")  # detection has already sniffed it


def stem(p: Path) -> str:
    """A trace's name from its path: the file name without its trace extensions."""
    return next((p.name[: -len(ext)] for ext in (".json.gz", ".json", ".parquet", ".gz")
                 if p.name.endswith(ext)), p.stem)
