"""``convert`` to S3, on a local moto S3 server (a thread of this process, a free port):
datasets and single files, reruns, the command line, a missing bucket, ``--executor ray``."""

from __future__ import annotations

import logging
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace.cli.main import cli
from neurontrace.errors import BadInput
from neurontrace.io.destination import Place

from support import KINETO

moto_server = pytest.importorskip(
    "moto.server", reason="moto is not installed (pip install 'moto[server]')"
)

BUCKET = "bucket"
#: Two small Kineto traces, named as the ranks of a run.
RANKS = {"rank0.json.gz": "cpu-mlp-training.json.gz", "rank1.json.gz": "cpu-rmsnorm-naive.json.gz"}


@dataclass
class S3:
    endpoint: str
    fs: pafs.S3FileSystem

    def uri(self, prefix: str, bucket: str = BUCKET) -> str:
        return (f"s3://{bucket}/{prefix}?endpoint_override={self.endpoint}"
                "&scheme=http&region=us-east-1")

    def listing(self, prefix: str) -> list[str]:
        """Everything under ``prefix`` relative to it, folders (markers) ending in ``/``."""
        base = f"{BUCKET}/{prefix}"
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True,
                                                        allow_not_found=True))
        return sorted(i.path[len(base) + 1:] + ("/" if i.type == pafs.FileType.Directory
                                                else "") for i in infos)

    def files(self, prefix: str) -> list[str]:
        return [f for f in self.listing(prefix) if not f.endswith("/")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    with pytest.MonkeyPatch.context() as mp:
        # moto accepts any key; set one so that pyarrow does not look for real credentials
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        werkzeug = logging.getLogger("werkzeug")  # else a line on stderr per request
        level = werkzeug.level
        werkzeug.setLevel(logging.ERROR)
        port = free_port()
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port,
                                                verbose=False)
        server.start()
        try:
            endpoint = f"127.0.0.1:{port}"
            fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                                   region="us-east-1", allow_bucket_creation=True)
            fs.create_dir(BUCKET)
            yield S3(endpoint, fs)
        finally:
            server.stop()
            werkzeug.setLevel(level)


def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    for name, fixture in RANKS.items():
        shutil.copy(KINETO / fixture, d / name)
    return d


def test_pyarrow_reads_the_endpoint_options_off_the_uri(s3: S3) -> None:
    place = Place.of(s3.uri("some/prefix"))
    assert isinstance(place.fs, pafs.S3FileSystem) and place.path == f"{BUCKET}/some/prefix"
    assert place.local is None  # (the path above ends with the prefix's name)


def test_a_dataset_on_s3_holds_the_tables_of_a_local_conversion(s3: S3, tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    done = neurontrace.convert(src, s3.uri("a/run"))
    assert s3.listing("a/run") == ["rank=0/", "rank=0/rank0.parquet",
                                   "rank=1/", "rank=1/rank1.parquet"]
    assert len(done.converted) == 2 and not done.kept
    assert sorted(p.as_posix() for p in done.outputs) == [
        f"{BUCKET}/a/run/rank={k}/rank{k}.parquet" for k in range(2)]
    local = neurontrace.convert(src, tmp_path / "ds")
    assert done.rows == local.rows > 0
    for k in range(2):
        got = pq.read_table(f"{BUCKET}/a/run/rank={k}/rank{k}.parquet", filesystem=s3.fs)
        want = pq.read_table(tmp_path / "ds" / f"rank={k}" / f"rank{k}.parquet")
        assert got.num_rows > 0
        assert got.equals(want, check_metadata=True)  # same inputs: same rows, same metadata


def test_a_single_trace_goes_to_one_file_on_s3(s3: S3) -> None:
    src = KINETO / "nested-ops.json"
    uri = s3.uri("one/o.parquet")
    done = neurontrace.convert(src, uri)
    assert s3.files("one") == ["o.parquet"]
    got = pq.read_table(f"{BUCKET}/one/o.parquet", filesystem=s3.fs)
    assert got.equals(neurontrace.load(src)) and done.rows == got.num_rows
    assert neurontrace.convert(src, uri).kept


def test_a_rerun_on_s3_keeps_deletes_and_reconverts(s3: S3, tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    (src / "rank2.json.gz").write_bytes((KINETO / "nested-ops.json.gz").read_bytes())
    uri = s3.uri("b/run")
    neurontrace.convert(src, uri)
    names = [f"rank={k}/rank{k}.parquet" for k in range(3)]
    files = [f"{BUCKET}/b/run/{n}" for n in names]
    again = neurontrace.convert(src, uri)
    assert sorted(p.as_posix() for p in again.kept) == files and not again.converted
    (src / "rank2.json.gz").unlink()
    fewer = neurontrace.convert(src, uri)
    assert len(fewer.kept) == 2 and not fewer.converted
    assert s3.listing("b/run") == ["rank=0/", names[0], "rank=1/", names[1]]  # no rank=2/
    shutil.copy(KINETO / "nested-ops.json.gz", src / "rank1.json.gz")
    changed = neurontrace.convert(src, uri)
    assert [p.as_posix() for p in changed.converted] == files[1:2]
    assert [p.as_posix() for p in changed.kept] == files[:1]
    got = pq.read_table(files[1], filesystem=s3.fs)
    assert got.num_rows == neurontrace.load(KINETO / "nested-ops.json.gz").num_rows


def test_the_command_line_writes_to_s3(s3: S3, tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    uri = s3.uri("c/run/")  # the README's form, a trailing slash
    r = CliRunner().invoke(cli, ["convert", str(src), uri, "--jobs", "2"])
    assert r.exit_code == 0, r.output
    assert s3.files("c/run") == ["rank=0/rank0.parquet", "rank=1/rank1.parquet"]
    r = CliRunner().invoke(cli, ["convert", str(src), uri])
    assert r.exit_code == 0 and "2 unchanged output(s) kept" in r.stderr


@pytest.mark.parametrize("single", [False, True], ids=["dataset", "file"])
def test_a_missing_bucket_is_bad_input_in_one_line(s3: S3, tmp_path: Path, single: bool) -> None:
    src = str(KINETO / "nested-ops.json") if single else str(run_dir(tmp_path))
    uri = s3.uri("run", bucket="no-such-bucket")
    r = CliRunner().invoke(cli, ["convert", src, uri])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "s3://no-such-bucket/run: no-such-bucket does not exist" in r.stderr
    with pytest.raises(BadInput, match="no-such-bucket"):
        neurontrace.convert(src, uri)
    assert s3.fs.get_file_info("no-such-bucket").type == pafs.FileType.NotFound


def test_ray_converts_into_s3(s3: S3, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'neurontrace[ray]')")
    src = run_dir(tmp_path)
    if ray.is_initialized():
        pytest.skip("a Ray started elsewhere: its workers may lack the test credentials")
    # the workers inherit this process's environment, the test credentials with it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        done = neurontrace.convert(src, s3.uri("d/run"), executor="ray")
        assert len(done.converted) == 2
        assert s3.files("d/run") == ["rank=0/rank0.parquet", "rank=1/rank1.parquet"]
        again = neurontrace.convert(src, s3.uri("d/run"), executor="ray")
        assert len(again.kept) == 2 and not again.converted
    finally:
        ray.shutdown()
