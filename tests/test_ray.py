"""``--executor ray``: one task per trace on a Ray instance the test starts locally."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import neurontrace
from neurontrace import schema as S
from neurontrace.errors import BadInput

from support import KINETO

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'neurontrace[ray]')")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def ranks(tmp_path: Path, n: int) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    for r in range(n):
        shutil.copy(KINETO / "nested-ops.json", d / f"worker_rank_{r}.json")
    return d


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file-uri"])
def test_ray_converts_one_task_per_rank_into_the_dataset(
    local_ray: None, tmp_path: Path, uri: bool
) -> None:
    src = ranks(tmp_path, 3)
    dest = tmp_path / "ds"
    target = dest.as_uri() if uri else str(dest)
    done = neurontrace.convert(src, target, executor="ray")
    assert done.rows == 27 and len(done.converted) == 3
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.parquet")) == [
        f"rank={k}/worker_rank_{k}.parquet" for k in range(3)
    ]
    lf = neurontrace.scan(dest)  # queries stay lazy scans over the dataset
    assert lf.group_by(S.RANK).len().collect()["len"].to_list() == [9, 9, 9]
    assert ray.is_initialized()  # a Ray the caller started is left running
    again = neurontrace.convert(src, target, executor="ray")
    assert len(again.kept) == 3 and not again.converted


def test_a_bad_rank_trace_on_ray_is_bad_input(local_ray: None, tmp_path: Path) -> None:
    src = ranks(tmp_path, 2)
    shutil.copy(KINETO / "truncated.json", src / "worker_rank_5.json")
    with pytest.raises(BadInput, match="worker_rank_5.json.*truncated"):
        neurontrace.convert(src, tmp_path / "ds", executor="ray")
    assert not (tmp_path / "ds").exists()
