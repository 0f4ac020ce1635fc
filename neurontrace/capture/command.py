"""``neurontrace capture -- CMD ...``: profile a user's own program, one folder per rank.

The program (``python train.py``, ``torchrun ...``) profiles itself with
:func:`neurontrace.capture.profile` around its loop; this runs it with the environment
that helper reads (run folder, device, steps) and, where TorchNeuron is installed, the
Neuron compile-time variables (descriptive names, NEFF cache inside the run folder).
Afterwards each rank's traces are converted::

    <out>/
        manifest.json      the command, its exit status, the environment it was given
        rank0/  manifest.json  trace.json.gz | <instance>_pid_<pid>/<timestamp>/...  events.parquet
        rank1/  ...

The runtime's whole-program capture (``NEURON_RT_INSPECT_ENABLE=1``) is not switched on:
it conflicts with the ``NeuronConfig`` capture the helper starts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurontrace.capture import manifest, neuron, rundir, session
from neurontrace.errors import BadInput, WorkloadFailed

Log = Callable[[str], None]


@dataclass
class CommandRun:
    out: Path
    command: list[str]
    returncode: int
    ranks: list[str] = field(default_factory=list)
    converted: dict[str, dict[str, Any]] = field(default_factory=dict)

    def events(self) -> list[Path]:
        return [self.out / r / c["output"] for r, c in self.converted.items() if c["output"]]


def environment(staging: Path, device: str, steps: int) -> dict[str, str]:
    env = {
        session.ENV_DIR: str(staging),
        session.ENV_DEVICE: device,
        session.ENV_STEPS: str(steps),
    }
    if device in ("auto", "neuron") and neuron.installed():
        env.update(neuron.environment(staging))
    return env


def _quiet(_: str) -> None:
    pass


def run(command: list[str], *, device: str = "auto", out: Path | None = None,
        steps: int = session.DEFAULT_STEPS, convert: bool = True,
        argv: list[str] | None = None, log: Log = _quiet) -> CommandRun:
    if not command:
        raise BadInput("nothing to run after --")
    out = out or rundir.default_out(Path(command[0]).name)
    staging = rundir.stage(out)
    try:
        record = manifest.base("command", argv)
        env = environment(staging, device, steps)
        log(f"running: {' '.join(command)}")
        try:
            returncode = subprocess.call(command, env={**os.environ, **env})
        except OSError as e:
            raise BadInput(f"{command[0]}: cannot run it ({e.strerror or e})") from None
        ranks = sorted((p.parent.name for p in staging.glob(f"rank*/{manifest.NAME}")
                        if p.parent.name.removeprefix("rank").isdecimal()),
                       key=lambda r: int(r.removeprefix("rank")))
        manifest.write(staging, {
            **record,
            "workload": {"name": "command", "command": command},
            "finished_at": manifest.now(),
            "returncode": returncode,
            "environment": env | {session.ENV_DIR: "."},
            "steps": steps,
            "ranks": ranks,
        })
        if not ranks:
            raise WorkloadFailed(
                f"{command[0]} exited with status {returncode} and wrote no trace: wrap its "
                "loop in `with neurontrace.capture.profile() as prof:` and call "
                "prof.step() after each step"
            )
        rundir.publish(staging, out)
    except BaseException:
        rundir.discard(staging)
        raise
    result = CommandRun(out, command, returncode, ranks)
    if convert:
        from neurontrace.capture.tables import convert_folder

        for r in ranks:
            log(f"{r}: converting")
            result.converted[r] = convert_folder(out / r, rank=int(r.removeprefix("rank")))
        manifest.update(out)
    if returncode != 0:
        raise WorkloadFailed(f"{command[0]} exited with status {returncode}; the traces it "
                             f"wrote are in {out}")
    return result
