"""Raw Neuron captures (``.ntff``, ``ntrace.pb``): converted by the Neuron tool, never by us.

NTFF and the ``.pb`` files have no public specification; only ``neuron-explorer`` (or
the older ``neuron-profile``, same flags) decodes them. When one is on PATH this module
runs ``view ... --output-format parquet --data-path CACHE`` into a cache folder next to
the output (reused while the capture is unchanged) and the Explorer Parquet reader reads
the result. Otherwise conversion fails with one line giving the command to run.

An NTFF is converted together with its NEFF (``-n x.neff -s y.ntff``): the NEFF in the
same folder sharing its longest numeric id (``neff_123_vnc_0.neff`` /
``123_vnc_0.ntff``). A system trace (``ntrace.pb``) is converted with its session folder
(``-d FOLDER``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from functools import partial
from pathlib import Path

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, ToolMissing
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Progress, Source
from neurontrace.readers.neuron.explorer import ExplorerReader, is_explorer_folder

#: Tools tried, in order (``neuron-profile`` is the name before SDK 2.2x).
TOOLS = ("neuron-explorer", "neuron-profile")
SYSTEM_TRACE = "ntrace.pb"
_DONE = ".complete"


def is_raw(path: Path) -> bool:
    return path.is_file() and (path.suffix == ".ntff" or path.name == SYSTEM_TRACE)


class RawReader:
    name = "neuron-raw"
    description = ("Raw Neuron capture (.ntff with its .neff, ntrace.pb): converted with "
                   "neuron-explorer view when it is on PATH")

    def sniff(self, path: Path, head: bytes) -> bool:
        return is_raw(path)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        raise BadInput(f"{path}: a raw Neuron capture is read through convert, which runs "
                       f"{TOOLS[0]} into a cache folder")

    def expand(self, path: Path, cache: Path) -> list[Source]:
        folder = explorer_output(view_args(path), path, cache)
        return [Source(path, self.name, partial(ExplorerReader().read, folder),
                       path.name.replace(".", "_"))]


def pair_neff(ntff: Path) -> Path | None:
    """The NEFF an NTFF belongs to: alone in its folder, or sharing its longest numeric id."""
    neffs = sorted(ntff.parent.glob("*.neff"))
    if len(neffs) <= 1:
        return neffs[0] if neffs else None
    for num in N.numeric_ids(ntff.stem):
        hits = [n for n in neffs if num in N.numeric_ids(n.stem)]
        if len(hits) == 1:
            return hits[0]
    return None


def view_args(capture: Path) -> list[str]:
    """Arguments of ``neuron-explorer view`` that name what to convert."""
    if capture.is_dir() or capture.name == SYSTEM_TRACE:
        return ["-d", str(capture if capture.is_dir() else capture.parent)]
    neff = pair_neff(capture)
    if neff is None:
        raise BadInput(f"{capture}: no .neff in {capture.parent} shares this NTFF's numeric "
                       "id; neuron-explorer needs the pair (-n x.neff -s y.ntff)")
    return ["-n", str(neff), "-s", str(capture)]


def _key(capture: Path) -> str:
    h = hashlib.sha1(str(capture.resolve()).encode())
    files = sorted(capture.rglob("*")) if capture.is_dir() else [capture]
    for f in files:
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def _content(args: list[str]) -> str:
    """Content hashes of what ``view ARGS`` reads (the NEFF, NTFF or session folder):
    a cached conversion is reused only when they are the ones it recorded."""
    from neurontrace.digest import content_digest

    named = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-n", "-s", "-d")]
    return " ".join(content_digest(Path(p)) for p in named)


def explorer_output(args: list[str], capture: Path, cache: Path) -> Path:
    """The Explorer Parquet folder for ``capture``, converting it first if needed."""
    out = cache / f"{capture.name}-{_key(capture)}"
    want = _content(args)
    if (out / _DONE).is_file() and \
            (out / _DONE).read_text(errors="replace").split("\n", 1)[0] == want:
        return _found(out, capture, "cache")  # converted from these very bytes
    tool = next((t for t in TOOLS if shutil.which(t)), None)
    command = [tool or TOOLS[0], "view", *args, "--output-format", "parquet",
               "--data-path"]
    if tool is None:
        shown = " ".join(shlex.quote(a) for a in command)
        raise ToolMissing(
            f"{capture}: a raw Neuron capture, which only the Neuron tools decode, and "
            f"neither {' nor '.join(TOOLS)} is on PATH; run `{shown} DIR` where they are "
            "installed, then `neurontrace convert DIR/profiles/global/<name>@latest OUT`"
        )
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        done = subprocess.run([*command, str(tmp)], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BadInput(f"{capture}: {tool} view failed (exit {done.returncode}): {last}")
        (tmp / _DONE).write_text(want + "\n"
                                 + " ".join(shlex.quote(a) for a in [*command, str(tmp)]))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _found(out, capture, tool)


def _found(out: Path, capture: Path, tool: str) -> Path:
    folders = sorted({p.parent for p in out.rglob("*.parquet") if is_explorer_folder(p.parent)},
                     key=lambda p: (not p.name.endswith("@latest"), str(p)))
    if not folders:
        raise BadInput(f"{capture}: {tool} wrote no Explorer Parquet tables under {out}")
    return folders[0]
