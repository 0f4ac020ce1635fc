"""Copy detection: each transfer once, its direction, size, and the op that caused it."""

from __future__ import annotations

import polars as pl

from neurontrace.analyses import copies, copy_summary

from synthetic import STREAM7, dev, op, rt, table


def eps_on_the_host() -> pl.LazyFrame:
    """SYNTHETIC, Neuron-shaped: ``x * eps`` with a Python float eps. The 0-dim eps
    tensor goes to the device through aten::to -> _to_copy -> copy_, which the runtime
    sees as a 4-byte nrt_tensor_write holding a dmem_buf_copyin."""
    return table(
        op("aten::mul", 0, 100),                            # 0
        op("aten::to", 10, 60),                             # 1
        op("aten::_to_copy", 12, 56),                       # 2
        op("aten::copy_", 15, 50),                          # 3
        rt("nrt_tensor_write", 20, 40, bytes=4, framework_row=3),
        rt("dmem_buf_copyin", 25, 30, bytes=4, framework_row=3),
        dev("nc_exec_running", 120, 50, framework_row=0),
    )


def test_one_transfer_seen_at_three_layers_is_reported_once() -> None:
    got = copies(eps_on_the_host())
    assert got.height == 1
    t = got.row(0, named=True)
    assert t["layers"] == ["framework", "runtime"]
    assert (t["op"], t["via"], t["direction"], t["bytes"], t["tiny"]) == (
        "aten::mul", "aten::copy_", "h2d", 4, True
    )


def test_the_outermost_call_time_is_kept_when_no_device_event_exists() -> None:
    t = copies(eps_on_the_host()).row(0, named=True)
    assert (t["start_ns"], t["dur_ns"]) == (20, 40)


def test_cuda_api_call_and_memcpy_share_a_correlation() -> None:
    # SYNTHETIC, CUDA-shaped (names as in the corpus traces).
    lf = table(
        op("aten::to", 0, 100),
        op("aten::copy_", 5, 90),
        rt("cudaMemcpyAsync", 10, 20, category="cuda_runtime", correlation=42,
           framework_row=1),
        dev("Memcpy HtoD (Pageable -> Device)", 25, 8, category="gpu_memcpy",
            correlation=42, bytes=4096, framework_row=1, track=STREAM7),
        rt("cudaMemcpyAsync", 40, 20, category="cuda_runtime", correlation=43,
           framework_row=1),
        dev("Memcpy DtoH (Device -> Pageable)", 55, 3, category="gpu_memcpy",
            correlation=43, bytes=8, framework_row=1, track=STREAM7),
    )
    got = copies(lf)
    assert got.select("start_ns", "dur_ns", "bytes", "direction", "tiny").rows() == [
        (25, 8, 4096, "h2d", False),  # times of the device event: the copy itself
        (55, 3, 8, "d2h", False),  # tiny is for host-to-device copies only
    ]
    assert got.get_column("layers").to_list() == [["framework", "runtime", "device"]] * 2


def test_a_flow_arrow_joins_a_runtime_copy_to_its_dma() -> None:
    lf = table(rt("nrt_tensor_read", 0, 10, flow_ids=["nrt:9"]),
               dev("dmem_buf_copyout", 3, 5, flow_ids=["nrt:9"], bytes=1 << 20))
    t = copies(lf).row(0, named=True)
    assert (t["direction"], t["bytes"], t["tiny"], t["op"]) == ("d2h", 1 << 20, False,
                                                                "(unlinked)")


def test_separate_copies_stay_separate() -> None:
    lf = table(rt("nrt_tensor_write", 0, 10), rt("nrt_tensor_write", 20, 10))
    assert copies(lf).height == 2


def test_a_copy_linked_to_a_non_copy_op_has_no_framework_layer() -> None:
    lf = table(op("aten::item", 0, 50),
               rt("cudaMemcpyAsync", 10, 20, category="cuda_runtime", framework_row=0))
    t = copies(lf).row(0, named=True)
    assert (t["op"], t["via"], t["layers"], t["direction"], t["bytes"], t["tiny"]) == (
        "aten::item", "aten::item", ["runtime"], None, None, None
    )


def test_kernels_and_framework_copies_alone_are_not_transfers() -> None:
    # aten::copy_ without anything beneath: Kineto does not say which devices.
    lf = table(op("aten::copy_", 0, 10), dev("copy_kernel", 20, 5))
    assert copies(lf).height == 0


def test_summary_per_op() -> None:
    lf = table(
        op("aten::add", 0, 100), rt("nrt_tensor_write", 10, 5, bytes=4, framework_row=0),
        op("aten::add", 200, 100), rt("nrt_tensor_write", 210, 5, bytes=4, framework_row=2),
        op("aten::mm", 400, 100), rt("nrt_tensor_write", 410, 50, bytes=4096, framework_row=4),
    )
    got = copy_summary(copies(lf))
    assert got.rows() == [("aten::add", "h2d", 2, 8, 10, 2), ("aten::mm", "h2d", 1, 4096, 50, 0)]
