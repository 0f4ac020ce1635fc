"""Capture a workload's variants: warm up, check, profile, convert. One folder per variant.

::

    <out>/
        manifest.json          the study: device, versions, variants, numerical check
        neff_cache/            (Neuron) every compiled graph the traces refer to
        naive/
            manifest.json      this variant's capture: profiler settings, files
            trace.json.gz      CPU / CUDA: the Kineto trace
            <instance>_pid_<pid>/<timestamp>/trace.json ntrace.pb ...   (Neuron)
            explorer/          (Neuron, when neuron-explorer is on PATH) its Parquet
            events.parquet     the event table (neurontrace convert)
        rms_norm/ ...
        compiled/ ...

Each variant runs ``warmup`` times outside the profiler (compilation happens there), is
compared with the first variant, then runs inside a :class:`~.session.Session`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurontrace.capture import devices, manifest, neuron, rundir, workloads
from neurontrace.capture.session import Session
from neurontrace.errors import WorkloadFailed

Log = Callable[[str], None]

#: (rtol, atol) by dtype for the check between variants: reductions reordered by a
#: compiler or a fused kernel differ from eager code by a few units in the last place.
TOLERANCE = {"float32": (1e-4, 1e-5), "float64": (1e-7, 1e-9),
             "bfloat16": (2e-2, 2e-2), "float16": (2e-3, 2e-3)}


@dataclass
class VariantRun:
    name: str
    description: str
    status: str = "ok"  # ok | skipped
    reason: str | None = None
    check: dict[str, Any] | None = None
    converted: dict[str, Any] | None = None

    @property
    def events(self) -> str | None:
        out = (self.converted or {}).get("output")
        return f"{self.name}/{out}" if out else None


@dataclass
class StudyRun:
    out: Path
    device: devices.Device
    workload: workloads.Workload
    steps: int
    variants: list[VariantRun] = field(default_factory=list)

    def events(self) -> list[Path]:
        return [self.out / v.events for v in self.variants if v.events]


def _quiet(_: str) -> None:
    pass


def run(workload: str = "rmsnorm", *, device: str = "auto", out: Path | None = None,
        steps: int = 10, warmup: int = 3, shape: str | None = None,
        dtype: str | None = None, check: bool = True, convert: bool = True,
        argv: list[str] | None = None, log: Log = _quiet) -> StudyRun:
    """Capture every variant of ``workload`` into ``out`` (default ``runs/<name>-<time>``)."""
    out = out or rundir.default_out(Path(workload).stem)
    staging = rundir.stage(out)
    try:
        if device in ("auto", "neuron") and neuron.installed():
            os.environ.update(neuron.environment(staging))
        record = manifest.base("study", argv)
        dev = devices.resolve(device)
        log(f"device: {dev.kind} ({dev.name})")
        wl = workloads.load(workload, dev, shape, dtype)
        study = StudyRun(out, dev, wl, steps)
        outputs = {}
        for v in wl.variants:
            result = VariantRun(v.name, v.description)
            study.variants.append(result)
            log(f"{v.name}: warming up ({warmup} calls, compilation included)")
            try:
                outputs[v.name] = _warm_up(v.run, dev, warmup)
            except Exception as e:
                if not v.optional:
                    raise WorkloadFailed(
                        f"variant {v.name} failed while warming up: {type(e).__name__}: {e}"
                    ) from e
                result.status, result.reason = "skipped", f"{type(e).__name__}: {e}"
                log(f"{v.name}: SKIPPED, {result.reason}")
        checked = _check(outputs, study.variants, enforce=check)
        for v, result in zip(wl.variants, study.variants, strict=True):
            if result.status == "ok":
                log(f"{v.name}: profiling {steps} steps")
                _profile(v, result, dev, staging, steps, warmup, wl, record)
            else:
                manifest.write(staging / v.name, _variant_record(
                    record, dev, wl, result, warmup, {}, manifest.now()))
        if dev.kind == "neuron":
            for result in study.variants:
                explored = neuron.explore(staging / result.name)
                manifest.update(staging / result.name, neuron_explorer=explored)
        manifest.write(staging, {
            **record,
            "device": dev.record(),
            "workload": {"name": wl.name, **wl.params},
            "rank": 0,
            "finished_at": manifest.now(),
            "steps": steps,
            "warmup_calls": warmup,
            "check": checked,
            "variants": [{"name": r.name, "description": r.description, "status": r.status,
                          "reason": r.reason, "folder": r.name} for r in study.variants],
        })
        rundir.publish(staging, out)
    except BaseException:
        rundir.discard(staging)
        raise
    if convert:
        for result in study.variants:
            if result.status == "ok":
                log(f"{result.name}: converting")
                result.converted = _convert(out / result.name)
        manifest.update(out)  # list the event tables too
    return study


def _warm_up(fn: Callable[[], Any], dev: devices.Device, calls: int) -> Any:
    value = None
    for _ in range(max(calls, 1)):
        value = fn()
    dev.synchronize()
    return value


def _profile(v: workloads.Variant, result: VariantRun, dev: devices.Device, staging: Path,
             steps: int, warmup: int, wl: workloads.Workload,
             record: dict[str, Any]) -> None:
    folder = staging / v.name
    started = manifest.now()
    session = Session(dev, folder, steps, neff_cache=staging / neuron.NEFF_CACHE)
    with session:
        for _ in range(session.calls):
            v.run()
            session.step()
    traces = session.traces()
    if not traces:
        raise WorkloadFailed(f"variant {v.name}: the profiler wrote no trace in {folder}")
    manifest.write(folder, _variant_record(record, dev, wl, result, warmup, {
        "profiler": session.settings,
        "traces": [str(t.relative_to(folder)) for t in traces],
    }, started))


def _variant_record(record: dict[str, Any], dev: devices.Device, wl: workloads.Workload,
                    result: VariantRun, warmup: int, extra: dict[str, Any],
                    started: str) -> dict[str, Any]:
    return {
        **record,
        "kind": "variant",
        "started_at": started,
        "finished_at": manifest.now(),
        "device": dev.record(),
        "workload": {"name": wl.name, "variant": result.name,
                     "description": result.description, **wl.params},
        "rank": 0,
        "status": result.status,
        "reason": result.reason,
        "warmup_calls": warmup,
        "check": result.check,
        **extra,
    }


def _check(outputs: dict[str, Any], runs: list[VariantRun], *, enforce: bool) -> dict[str, Any]:
    """Compare every variant's output with the first one's; raise on a mismatch."""
    if not enforce:
        return {"compared": False, "reason": "--no-check"}
    if len(outputs) < 2:
        return {"reference": next(iter(outputs), None), "compared": False,
                "reason": "fewer than two variants ran"}
    torch = devices.import_torch()
    ref_name, ref = next(iter(outputs.items()))
    ref_t = _tensor(ref_name, ref, torch)
    failures = []
    for r in runs:
        if r.name not in outputs or r.name == ref_name:
            continue
        t = _tensor(r.name, outputs[r.name], torch)
        if t.shape != ref_t.shape:
            r.check = {"against": ref_name, "ok": False,
                       "reason": f"shape {list(t.shape)} != {list(ref_t.shape)}"}
        else:
            rtol, atol = TOLERANCE.get(str(ref.dtype).removeprefix("torch."), (1e-4, 1e-5))
            diff = (t - ref_t).abs()
            ok = bool((diff <= atol + rtol * ref_t.abs()).all())
            r.check = {"against": ref_name, "ok": ok, "max_abs_diff": float(diff.max()),
                       "rtol": rtol, "atol": atol}
        if not r.check["ok"]:
            failures.append(r)
    if failures:
        detail = "; ".join(f"{r.name}: {r.check.get('reason') or r.check}"
                           for r in failures if r.check)
        raise WorkloadFailed(f"variants disagree with {ref_name} ({detail}); "
                             "rerun with --no-check to profile anyway")
    return {"reference": ref_name, "compared": True, "ok": True,
            "variants": {r.name: r.check for r in runs if r.check}}


def _tensor(name: str, value: Any, torch: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        raise WorkloadFailed(f"variant {name} returned {type(value).__name__}; the check "
                             "between variants needs a tensor (or pass --no-check)")
    return value.detach().to("cpu", torch.float64)


def _convert(folder: Path) -> dict[str, Any]:
    from neurontrace.capture.tables import convert_folder

    return convert_folder(folder)
