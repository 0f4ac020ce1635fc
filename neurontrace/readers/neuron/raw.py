"""Raw Neuron captures (``.ntff``, ``ntrace.pb``): converted by the Neuron tool, never by us.

NTFF and the ``.pb`` files have no public specification; only ``neuron-explorer``
decodes them into Parquet. When it is on PATH this module runs ``neuron-explorer view
... --output-format parquet --data-path DIR --ingest-only --display-name NAME`` into a
cache folder next to the output (reused while the capture is unchanged) and the
Explorer Parquet reader reads the result. ``--ingest-only`` matters: without it
``view`` ingests and then starts its UI/API server, which never returns.

The child runs in its own process group with a timeout (:data:`TIMEOUT_ENV`, default
:data:`DEFAULT_TIMEOUT` seconds); on timeout, Ctrl-C or any other exit the whole group
is killed and its half-written output removed (it is written in a run folder of
:mod:`neurontrace.io.scratch` inside the cache, renamed into place only when complete).

``neuron-profile`` (the tool's name before Neuron Explorer) refuses Parquet output: it
is never used here; with only it on PATH, conversion fails with the legacy-JSON command
to run instead (``--output-format json``, read by the legacy JSON readers).

Before it, ``neuron-explorer --show-profile-schema`` (``view --show-profile-schema`` in
SDK 2.33's reference) prints the profile schema the installed tool writes, an OpenAPI
document as YAML: what it printed, with the version read from it (:func:`schema_version_of`)
and its SHA-256, is kept with the converted folder and goes to the output's
``neurontrace.trace`` metadata as ``neuron.tool_profile_schema`` (beside
``neuron.profile_schema_version``, the version the folder's ``Metadata`` names).

An NTFF is converted together with its NEFF (``-n x.neff -s y.ntff``): the NEFF in the
same folder, or in a ``neffs/`` folder in it or beside it, sharing its longest numeric id
(``neff_123_vnc_0.neff`` / ``123_vnc_0.ntff``). A system trace (``ntrace.pb``) is
converted with its session folder (``-d FOLDER``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
from functools import partial
from pathlib import Path

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, ToolMissing
from neurontrace.io import atomic, scratch
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Progress, Source
from neurontrace.readers.neuron.explorer import is_explorer_folder, read_folder

#: The converter to Parquet. ``neuron-profile`` (its name before Neuron Explorer) writes
#: legacy JSON only: it refuses ``--output-format parquet``.
EXPLORER = "neuron-explorer"
LEGACY = "neuron-profile"
SYSTEM_TRACE = "ntrace.pb"
#: A sibling folder of NEFFs (vLLM-style runs keep them apart from the NTFFs).
NEFF_FOLDER = "neffs"
#: Environment variable: seconds ``neuron-explorer`` may run before it is killed.
TIMEOUT_ENV = "NEURONTRACE_EXPLORER_TIMEOUT"
DEFAULT_TIMEOUT = 600.0
#: The ``--display-name`` we give, so that the output folder is ours to find.
DISPLAY_NAME = "neurontrace"
_DONE = ".complete"
#: The commands that print the installed tool's profile schema (SDK 2.31's reference
#: documents the first, SDK 2.33's the second); the first that succeeds is kept.
SHOW_SCHEMA = (["--show-profile-schema"], ["view", "--show-profile-schema"])
#: Seconds it may take (it prints a document built into the binary); a tool that does
#: not answer in time is not asked the second form.
SCHEMA_TIMEOUT = 10.0
#: Characters of its output kept in the metadata (the rest is counted, not kept).
SCHEMA_KEPT = 1 << 20
#: Where the kept schema lies in a converted folder (with the tables, in the cache).
SCHEMA_FILE = "tool-profile-schema.json"
#: The first ``version:`` key of the printed document with a semantic version (OpenAPI's
#: ``info.version``; that the tool puts the profile schema version there is a guess).
_SCHEMA_VERSION = re.compile(
    r"""^\s*(?:profile_schema_version|version)\s*:\s*['"]?(\d+\.\d+(?:\.\d+)?)""", re.M)


class RawReader:
    name = "neuron-raw"
    description = ("Raw Neuron capture (.ntff with its .neff, ntrace.pb): converted with "
                   "neuron-explorer view when it is on PATH")

    def sniff(self, path: Path, head: bytes) -> bool:
        return path.is_file() and (path.suffix == ".ntff" or path.name == SYSTEM_TRACE)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        raise BadInput(f"{path}: a raw Neuron capture is read through convert, which runs "
                       f"{EXPLORER} into a cache folder")

    def expand(self, path: Path, cache: Path) -> list[Source]:
        folder, schema = explorer_output(view_args(path), path, cache)
        return [Source(path, self.name, partial(read_folder, folder, schema),
                       path.name.replace(".", "_"))]


def schema_version_of(text: str) -> str | None:
    """The profile schema version in what ``--show-profile-schema`` printed: the first
    ``version:`` (or ``profile_schema_version:``) key holding ``MAJOR.MINOR[.PATCH]``."""
    m = _SCHEMA_VERSION.search(text)
    return m.group(1) if m else None


def show_schema(timeout: float) -> dict[str, object] | None:
    """What the installed ``neuron-explorer`` prints for :data:`SHOW_SCHEMA` (the first
    form that exits 0 with output), described: ``command``, ``version``
    (:func:`schema_version_of`), ``sha256`` and ``chars`` of the whole output, ``text``
    (its first :data:`SCHEMA_KEPT` characters), ``truncated``. None when neither form
    does (an older tool, a stand-in that does not know the option)."""
    for args in SHOW_SCHEMA:
        command = [EXPLORER, *args]
        try:
            done = run_tool(command, min(timeout, SCHEMA_TIMEOUT))
        except (subprocess.TimeoutExpired, OSError):
            return None
        text = done.stdout
        if done.returncode == 0 and text.strip():
            return {"command": " ".join(command), "version": schema_version_of(text),
                    "sha256": hashlib.sha256(text.encode()).hexdigest(), "chars": len(text),
                    "text": text[:SCHEMA_KEPT], "truncated": len(text) > SCHEMA_KEPT}
    return None


def pair_neff(ntff: Path) -> Path | None:
    """The NEFF an NTFF belongs to: alone in its folder (else in a ``neffs/`` folder in
    it or beside it), or the one there sharing its longest numeric id."""
    wheres = (ntff.parent, ntff.parent / NEFF_FOLDER, ntff.parent.parent / NEFF_FOLDER)
    neffs = next((found for w in wheres if (found := sorted(w.glob("*.neff")))), [])
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
        raise BadInput(f"{capture}: no .neff in {capture.parent} (or a {NEFF_FOLDER}/ in "
                       "it or beside it) shares this NTFF's numeric id; neuron-explorer "
                       "needs the pair (-n x.neff -s y.ntff)")
    return ["-n", str(neff), "-s", str(capture)]


def _content(args: list[str]) -> str:
    """Content hashes of what ``view ARGS`` reads (the NEFF, NTFF or session folder):
    they name the cache entry of a conversion (:func:`explorer_output`)."""
    from neurontrace.io.digest import content_digest

    return " ".join(content_digest(Path(p)) for p in args[1::2])  # after -n, -s or -d


def explorer_timeout() -> float:
    """Seconds ``neuron-explorer`` may run: :data:`TIMEOUT_ENV` when set (a positive
    number), else :data:`DEFAULT_TIMEOUT`. Another value is BadInput naming it."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip() or str(DEFAULT_TIMEOUT)
    with contextlib.suppress(ValueError):
        if math.isfinite(value := float(raw)) and value > 0:
            return value
    raise BadInput(f"{TIMEOUT_ENV}={raw!r}: not a positive number of seconds")


def timeout_message(tool: str, seconds: float) -> str:
    return f"{tool} did not finish in {seconds:g} s (set {TIMEOUT_ENV})"


def run_tool(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process group of its own (its output captured), waiting at
    most ``timeout`` seconds. On timeout (``subprocess.TimeoutExpired``), Ctrl-C or any
    other exception the whole group is killed (and the child reaped, by ``Popen``'s
    exit) before the exception goes on, so that no process of it (a server it started
    included) outlives the call."""
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace",
                          start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        finally:  # on any exit; what it left running (a server it forked) too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def view_command(args: list[str], data_path: Path | str) -> list[str]:
    """The ``neuron-explorer view`` command that ingests ``args`` into ``data_path``
    and returns (``--ingest-only``: no server), under our ``--display-name``."""
    return [EXPLORER, "view", *args, "--output-format", "parquet", "--data-path",
            str(data_path), "--ingest-only", "--display-name", DISPLAY_NAME]


def _missing(capture: Path, args: list[str]) -> ToolMissing:
    shown = shlex.join(view_command(args, "DIR"))
    if shutil.which(LEGACY):
        legacy = shlex.join([LEGACY, "view", *args, "--output-format", "json", "--output-file",
                             "OUT.json"])
        return ToolMissing(
            f"{capture}: a raw Neuron capture; {EXPLORER} is not on PATH and {LEGACY} "
            f"writes no Parquet: run `{legacy}` and convert OUT.json, or `{shown}` where "
            f"{EXPLORER} is installed"
        )
    return ToolMissing(
        f"{capture}: a raw Neuron capture, which only the Neuron tools decode, and "
        f"{EXPLORER} is not on PATH; run `{shown}` where it is installed, then "
        "`neurontrace convert DIR/profiles/global/<name>@latest OUT`"
    )


def explorer_output(args: list[str], capture: Path,
                    cache: Path) -> tuple[Path, dict[str, object] | None]:
    """The Explorer Parquet folder for ``capture``, converting it first if needed, and the
    profile schema the tool printed (:func:`show_schema`), kept with it. A cache entry is
    named by the content hashes of what ``view`` reads: it is reused only for those very
    bytes."""
    want = _content(args)
    out = cache / f"{capture.name}-{hashlib.sha1(want.encode()).hexdigest()[:12]}"
    if (out / _DONE).is_file():
        return _found(out, capture, "cache")
    if shutil.which(EXPLORER) is None:
        raise _missing(capture, args)
    timeout = explorer_timeout()
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)  # 0700 if a run removed it
    with scratch.run_folder(cache) as work:  # removed on every exit path
        tmp = work / "view"
        tmp.mkdir()
        schema = show_schema(timeout)
        if schema is not None:
            (tmp / SCHEMA_FILE).write_text(json.dumps(schema))
        command = view_command(args, tmp)
        try:
            done = run_tool(command, timeout)
        except subprocess.TimeoutExpired:
            raise BadInput(f"{capture}: {timeout_message(EXPLORER, timeout)}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BadInput(f"{capture}: {EXPLORER} view failed (exit {done.returncode}): "
                           f"{last}")
        (tmp / _DONE).write_text(want + "\n" + shlex.join(command))
        atomic.replace_dir(tmp, out, trash=work)  # over an entry without its mark
    return _found(out, capture, EXPLORER)


def _found(out: Path, capture: Path, tool: str) -> tuple[Path, dict[str, object] | None]:
    folders = sorted({p.parent for p in out.rglob("*.parquet") if is_explorer_folder(p.parent)},
                     key=lambda p: (not p.name.startswith(DISPLAY_NAME),
                                    not p.name.endswith("@latest"), str(p)))
    if not folders:
        raise BadInput(f"{capture}: {tool} wrote no Explorer Parquet tables under {out}")
    try:
        kept = json.loads((out / SCHEMA_FILE).read_text(errors="replace"))
    except (OSError, ValueError):
        kept = None  # the tool printed no schema
    return folders[0], kept if isinstance(kept, dict) else None
