"""Raw Neuron captures: ``neuron-explorer`` must ingest and return, never hang (issue 15, 1).

The stand-in ``neuron-explorer`` here behaves like the real one (AWS get-started and the
vLLM profiling tutorial): ``view`` ingests (it copies the Explorer fixture's tables into
``<data-path>/profiles/global/<display-name>@latest``) and then, unless given
``--ingest-only``, starts a server process and serves forever. It writes its pid and its
server's to a pid file, so that a test can check that none of them outlives convert.
The stand-in ``neuron-profile`` refuses Parquet, as the real one does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from neurontrace import schema as S
from neurontrace.capture import neuron as capture_neuron

FIX = Path(__file__).parent.parent / "fixtures" / "neuron" / "explorer_rmsnorm_vnc_0"
CLI = Path(sys.executable).parent / "neurontrace"
LIMIT = 120  # seconds convert may take here before the test calls it hung

EXPLORER = '''#!{python}
"""Stand-in neuron-explorer (see tests/test_neuron_raw.py)."""
import os, shutil, subprocess, sys, time
from pathlib import Path

args = sys.argv[1:]
pids = [os.getpid()]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if args in (["--show-profile-schema"], ["view", "--show-profile-schema"]):
    # the real one prints the OpenAPI document built into it, as YAML
    print("openapi: 3.0.3")
    print("info:")
    print("  title: Neuron Explorer profile schema")
    print("  version: 7.4.0")
    print("components:")
    print("  schemas:")
    print("    Instruction:")
    print("      type: object")
    sys.exit(0)
assert args[0] == "view" and args[args.index("--output-format") + 1] == "parquet", args
data = Path(args[args.index("--data-path") + 1])
name = args[args.index("--display-name") + 1] if "--display-name" in args else "profile"
out = data / "profiles" / "global" / f"{{name}}@latest"
out.mkdir(parents=True)
for table in Path({fixture!r}).glob("*.parquet"):
    shutil.copy(table, out / table.name)
hang = os.environ.get("STANDIN_HANG") == "1"
if "--ingest-only" not in args or hang:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    pids.append(server.pid)
with open({pids!r}, "w") as f:
    f.write(" ".join(map(str, pids)))
while "--ingest-only" not in args or hang:
    time.sleep(0.2)  # the UI/API server: until killed
'''

PROFILE = '''#!/bin/sh
# stand-in neuron-profile: like the real one, it writes no Parquet
echo "$@" >> {log}
for a in "$@"; do
  if [ "$a" = parquet ]; then
    echo "ERROR: parquet output is not supported, please use neuron-explorer" >&2; exit 1
  fi
done
'''


def _install(bin_dir: Path, name: str, text: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(text)
    exe.chmod(0o755)


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Path]:
    """A bin folder with the stand-in ``neuron-explorer``; its call log and pid file."""
    bin_dir = tmp_path / "bin"
    log, pids = tmp_path / "calls.log", tmp_path / "pids"
    _install(bin_dir, "neuron-explorer", EXPLORER.format(
        python=sys.executable, log=str(log), pids=str(pids), fixture=str(FIX)))
    return {"bin": bin_dir, "log": log, "pids": pids}


def _capture(tmp_path: Path) -> Path:
    folder = tmp_path / "capture"
    folder.mkdir()
    (folder / "neff_123_vnc_0.neff").write_bytes(b"SYNTHETIC")
    (folder / "123_vnc_0.ntff").write_bytes(b"SYNTHETIC")
    return folder / "123_vnc_0.ntff"


def _env(bin_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NEURONTRACE_EXPLORER_TIMEOUT"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _convert(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([str(CLI), "convert", *args], env=env, capture_output=True,
                              text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"convert did not finish in {LIMIT} s: neuron-explorer was left serving")


def test_convert_passes_ingest_only_and_returns_with_no_explorer_process_left(
        tmp_path: Path, tools: dict[str, Path]) -> None:
    ntff = _capture(tmp_path)
    out = tmp_path / "out" / "c.parquet"
    done = _convert([str(ntff), str(out)], _env(tools["bin"]))
    assert done.returncode == 0, done.stderr
    call = tools["log"].read_text().split()
    assert call[-3:] == ["--ingest-only", "--display-name", "neurontrace"]
    assert pl.read_parquet(out).filter(pl.col(S.NAME) == "nc_exec_running").height > 0
    assert tools["pids"].is_file() and not any(_alive(p) for p in _pids(tools["pids"]))
    cache = out.parent / ".neurontrace-cache"
    assert not [f for f in _files(cache) if ".neurontrace-tmp-" in f]  # no run folder left


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_hanging_explorer_is_killed_at_the_timeout_with_one_line_and_exit_2(
        tmp_path: Path, tools: dict[str, Path], how: str) -> None:
    ntff = _capture(tmp_path)
    out = tmp_path / "out" / "c.parquet"
    (tmp_path / "out").mkdir()
    start = time.monotonic()
    if how == "env":
        done = _convert([str(ntff), str(out)], _env(
            tools["bin"], STANDIN_HANG="1", NEURONTRACE_EXPLORER_TIMEOUT="2"))
    else:  # the flag wins over the variable
        done = _convert(["--explorer-timeout", "2", str(ntff), str(out)], _env(
            tools["bin"], STANDIN_HANG="1", NEURONTRACE_EXPLORER_TIMEOUT="500"))
    assert time.monotonic() - start < LIMIT
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"neurontrace: error: {ntff}: neuron-explorer did not finish in 2 s "
        "(set NEURONTRACE_EXPLORER_TIMEOUT)"]
    pids = _pids(tools["pids"])
    assert len(pids) == 2 and not any(_alive(p) for p in pids)  # the server it started too
    assert _files(tmp_path / "out") == [".neurontrace-cache"] or \
        _files(tmp_path / "out") == []  # the empty cache at most: nothing half-written


def test_ctrl_c_during_conversion_kills_explorer_and_exits_130(
        tmp_path: Path, tools: dict[str, Path]) -> None:
    ntff = _capture(tmp_path)
    out = tmp_path / "out" / "c.parquet"
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen([str(CLI), "convert", str(ntff), str(out)],
                            env=_env(tools["bin"], STANDIN_HANG="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + LIMIT
        while not tools["pids"].is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tools["pids"].is_file(), "the stand-in never started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=LIMIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert not any(_alive(p) for p in _pids(tools["pids"]))
    assert _files(tmp_path / "out") in ([], [".neurontrace-cache"])


def test_neuron_profile_is_never_a_parquet_fallback(tmp_path: Path) -> None:
    ntff = _capture(tmp_path)
    log = tmp_path / "profile.log"
    _install(tmp_path / "bin", "neuron-profile", PROFILE.format(log=log))
    env = _env(tmp_path / "bin")
    env["PATH"] = str(tmp_path / "bin")
    done = _convert([str(ntff), str(tmp_path / "o.parquet")], env)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "neuron-explorer is not on PATH and neuron-profile writes no Parquet" in line
    assert (f"neuron-profile view -n {ntff.parent / 'neff_123_vnc_0.neff'} -s {ntff} "
            "--output-format json --output-file OUT.json") in line
    assert not log.exists()  # it was never asked for Parquet
    assert not (tmp_path / "o.parquet").exists()


def test_a_bad_explorer_timeout_is_refused_in_one_line(tmp_path: Path,
                                                       tools: dict[str, Path]) -> None:
    ntff = _capture(tmp_path)
    done = _convert([str(ntff), str(tmp_path / "o.parquet")],
                    _env(tools["bin"], NEURONTRACE_EXPLORER_TIMEOUT="soon"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "neurontrace: error: NEURONTRACE_EXPLORER_TIMEOUT='soon': not a positive number "
        "of seconds"]
    assert not tools["log"].exists()


def test_capture_records_a_hanging_explorer_as_timed_out_and_kills_it(
        tmp_path: Path, tools: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    session = tmp_path / "run" / "naive" / "i-1_pid_2" / "0001"
    session.mkdir(parents=True)
    (session / "ntrace.pb").write_bytes(b"SYNTHETIC")
    monkeypatch.setenv("PATH", _env(tools["bin"])["PATH"])
    monkeypatch.setenv("STANDIN_HANG", "1")
    monkeypatch.setenv("NEURONTRACE_EXPLORER_TIMEOUT", "2")
    (record,) = capture_neuron.explore(tmp_path / "run" / "naive")
    assert record["ran"] is True and record["returncode"] is None
    assert record["stderr_tail"] == \
        "neuron-explorer did not finish in 2 s (set NEURONTRACE_EXPLORER_TIMEOUT)"
    assert record["command"][-3:] == ["--ingest-only", "--display-name", "0001"]
    assert record["output"] is None  # the half-ingested folder was removed
    assert not any(_alive(p) for p in _pids(tools["pids"]))


def test_the_convert_flag_sets_the_variable_raw_reads() -> None:
    from neurontrace.cli import convert
    from neurontrace.readers.neuron import raw

    assert convert.EXPLORER_TIMEOUT == raw.TIMEOUT_ENV


def test_the_profile_schema_the_tool_prints_is_kept_in_the_metadata(
        tmp_path: Path, tools: dict[str, Path]) -> None:
    import neurontrace

    ntff = _capture(tmp_path)
    out = tmp_path / "out" / "c.parquet"
    done = _convert([str(ntff), str(out)], _env(tools["bin"]))
    assert done.returncode == 0, done.stderr
    assert tools["log"].read_text().splitlines()[0] == "--show-profile-schema"
    neuron = neurontrace.file_metadata(out)["trace"]["neuron"]
    kept = neuron["tool_profile_schema"]
    assert (kept["command"], kept["version"]) == ("neuron-explorer --show-profile-schema",
                                                  "7.4.0")
    assert kept["text"].startswith("openapi: 3.0.3\ninfo:\n") and not kept["truncated"]
    # beside the version the converted folder's Metadata names
    assert neuron["profile_schema_version"] == "7.4.0"
    # a second conversion reads the cache, the tool not run again, and keeps it too
    calls = tools["log"].read_text()
    again = tmp_path / "out" / "d.parquet"
    assert _convert([str(ntff), str(again)], _env(tools["bin"])).returncode == 0
    assert tools["log"].read_text() == calls
    assert neurontrace.file_metadata(again)["trace"]["neuron"]["tool_profile_schema"] == kept


def test_the_schema_version_is_read_from_the_printed_document() -> None:
    from neurontrace.readers.neuron.raw import schema_version_of

    # OpenAPI's own version (openapi:) is not it; info.version, quoted or not, is
    assert schema_version_of("openapi: 3.0.3\ninfo:\n  title: t\n  version: '12.0.1'\n") \
        == "12.0.1"
    assert schema_version_of("profile_schema_version: 7.4\n") == "7.4"
    assert schema_version_of("openapi: 3.0.3\ninfo:\n  description: no version: here\n") \
        is None


def test_a_raw_capture_in_a_run_folder_keeps_the_profile_schema_the_tool_prints(
        tmp_path: Path, tools: dict[str, Path]) -> None:
    """As a plain raw file does: what the tool printed goes with the converted part."""
    import neurontrace

    rank = tmp_path / "run" / "i-1_pid_9" / "20250101T000000"
    rank.mkdir(parents=True)
    (rank / "neff_123_vnc_0.neff").write_bytes(b"SYNTHETIC")
    (rank / "123_vnc_0.ntff").write_bytes(b"SYNTHETIC")
    out = tmp_path / "ds"
    done = _convert([str(tmp_path / "run"), str(out)], _env(tools["bin"]))
    assert done.returncode == 0, done.stderr
    [written] = out.rglob("*.parquet")
    [part] = neurontrace.file_metadata(written)["trace"]["parts"]
    assert part["format"] == "neuron-explorer"
    kept = part["trace"]["neuron"]["tool_profile_schema"]
    assert (kept["command"], kept["version"]) == ("neuron-explorer --show-profile-schema",
                                                  "7.4.0")
    assert part["trace"]["neuron"]["profile_schema_version"] == "7.4.0"
