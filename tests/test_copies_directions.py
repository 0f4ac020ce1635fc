"""``copies`` keeps host-to-device, device-to-host, device-to-device and peer copies apart:
on every corpus trace, the counts and bytes per direction of ``copies --json`` equal
those computed here from the raw JSON with the standard library only; only host-to-device
copies are ``tiny`` (the "scalars living on the host" hint), and byte counts are read
wherever the trace gives them (MTIA's ``"mem size": "14139908 bytes"``).

What a transfer is, independently of the analysis: one device copy event (a CUDA/HIP
``gpu_memcpy``, direction from its name ``Memcpy HtoD/DtoH/DtoD/PtoP``; an MTIA
``dma_request``, direction from ``args.direction``) together with the runtime copy calls
(``cudaMemcpyAsync``, ``enqueueCommand memcpyHtoDAsync``, ...) sharing its
``correlation``; MTIA splits one request into several DMAs of one correlation, which
are one transfer of their summed size (equal to the request's ``mem size``). A DMA
without a correlation (one the profiler saw no request for) is a transfer alone; a
runtime copy call with no device event is one too, its direction from its name (null
when the name does not say, e.g. the corpus CUPTI trace's bare ``cudaMemcpyAsync``).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neurontrace.cli.main import cli

from support import corpus_dir

_CORPUS = corpus_dir()
TRACES = sorted(_CORPUS.glob("*.json*")) if _CORPUS is not None else []

_NAME_DIRECTION = {"htod": "h2d", "dtoh": "d2h", "dtod": "d2d", "ptop": "p2p"}
_ARG_DIRECTION = {"HOST_TO_DEVICE": "h2d", "DEVICE_TO_HOST": "d2h",
                  "DEVICE_TO_DEVICE": "d2d", "PEER_TO_PEER": "p2p"}
_RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "mtia_runtime")
_BYTE_KEYS = ("bytes", "Bytes", "size", "mem size")


def _events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _name_direction(name: str) -> str | None:
    found = re.search(r"memcpy ?(HtoD|DtoH|DtoD|PtoP)", name, re.IGNORECASE)
    return _NAME_DIRECTION[found.group(1).lower()] if found else None


def _size(args: dict[str, Any]) -> int | None:
    for key in _BYTE_KEYS:
        value = args.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            text = value.removesuffix(" bytes")
            if text.isdigit():
                return int(text)
    return None


def expected_by_direction(path: Path) -> dict[str | None, tuple[int, int]]:
    """direction -> (transfers, bytes) from the raw JSON (see the module docstring)."""
    groups: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(
        lambda: {"device": [], "runtime": []})
    for i, e in enumerate(_events(path)):
        args = e.get("args") or {}
        name = str(e.get("name", ""))
        if e.get("cat") == "gpu_memcpy" or (name == "dma_request" and "direction" in args):
            side = "device"
        elif e.get("cat") in _RUNTIME_CATEGORIES and "memcpy" in name.lower():
            side = "runtime"
        else:
            continue
        corr = args.get("correlation")
        groups[("c", corr) if corr is not None else ("alone", i)][side].append(e)
    out: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    for g in groups.values():
        device = [(e.get("args") or {}) for e in g["device"]]
        runtime = [(e.get("args") or {}) for e in g["runtime"]]
        direction = next(
            (d for e, a in zip(g["device"], device, strict=True)
             for d in [_ARG_DIRECTION.get(a.get("direction", ""))
                       or _name_direction(str(e.get("name", "")))] if d),
            next((d for e in g["runtime"]
                  for d in [_name_direction(str(e.get("name", "")))] if d), None),
        )
        sizes = [s for a in device if (s := _size(a)) is not None]
        calls = [s for a in runtime if (s := _size(a)) is not None]
        out[direction][0] += 1
        out[direction][1] += max([sum(sizes)] * bool(sizes) + calls, default=0)
    return {d: (n, b) for d, (n, b) in out.items()}


def copies_json(path: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["copies", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return list(json.loads(result.stdout))


def got_by_direction(rows: list[dict[str, Any]]) -> dict[str | None, tuple[int, int]]:
    out: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        out[r["direction"]][0] += 1
        out[r["direction"]][1] += r["bytes"] or 0
    return {d: (n, b) for d, (n, b) in out.items()}


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_copies_per_direction_match_the_raw_json(path: Path) -> None:
    rows = copies_json(path)
    assert got_by_direction(rows) == expected_by_direction(path)
    # every copy the raw JSON gives a size for has one in the output
    sized = {d for d, (_, b) in expected_by_direction(path).items() if b}
    assert all(r["bytes"] is not None for r in rows if r["direction"] in sized)


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_only_host_to_device_copies_are_tiny_or_hinted_as_host_scalars(path: Path) -> None:
    rows = copies_json(path)
    assert all(r["direction"] == "h2d" for r in rows if r["tiny"])
    text = CliRunner().invoke(cli, ["copies", str(path)]).output
    hinted = "scalars living on the host" in text
    assert hinted == any(r["tiny"] for r in rows)
    assert "between host and device" not in text


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_report_counts_copies_per_direction_as_the_raw_json(path: Path) -> None:
    """``report`` heads its copies with the count per direction (never "between host and
    device" for copies between devices), in --json as ``directions``."""
    r = CliRunner().invoke(cli, ["report", str(path), "--json"])
    assert r.exit_code == 0, r.output
    got = {d["direction"]: d["copies"] for d in json.loads(r.stdout)["directions"]}
    assert got == {d: n for d, (n, _) in expected_by_direction(path).items()}
    text = CliRunner().invoke(cli, ["report", str(path)]).output
    assert "between host and device" not in text


def test_the_corpus_has_device_to_device_copies_and_mtia_dma_sizes() -> None:
    """The corpus cases this file is about are present (else the checks above prove
    little): d2d-only traces, and MTIA requests whose size is only in ``mem size``."""
    if _CORPUS is None:
        pytest.skip("NEURONTRACE_CORPUS is not set to a folder of real Kineto traces")
    by_name = {p.name.split(".")[0]: expected_by_direction(p) for p in TRACES}
    assert set(by_name["nccl_parser_config"]) == {"d2d"}
    mtia = copies_json(_CORPUS / "mtia_inference_trace.json.gz")
    assert mtia and all(r["bytes"] is not None for r in mtia)


def test_a_copy_size_given_as_mem_size_text_is_read(tmp_path: Path) -> None:
    """SYNTHETIC, MTIA-shaped: a runtime copy request whose size is ``"<n> bytes"``."""
    path = tmp_path / "mtia.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "mtia_runtime", "name": "enqueueCommand memcpyHtoDAsync",
         "pid": 1, "tid": 2, "ts": 10, "dur": 1,
         "args": {"correlation": 7, "mem size": "14139908 bytes"}},
    ]}))
    (row,) = copies_json(path)
    assert (row["direction"], row["bytes"], row["tiny"]) == ("h2d", 14139908, False)
