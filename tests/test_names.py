"""Kernel names in the terminal: the kernel and its functor stay, the rest goes."""

from __future__ import annotations

import json

from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from neurontrace.cli.main import cli
from neurontrace.views.names import short

from support import FIXTURES

MUL = ("void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<"
       "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"
       "<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, "
       "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
       "std::array<char*, 3ul>)")
MEAN = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
        "at::native::MeanOps<c10::BFloat16, float, float, c10::BFloat16>, unsigned int, "
        "c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<"
        "c10::BFloat16, float, float, c10::BFloat16>, unsigned int, c10::BFloat16, 4, 8>)")
NEG = ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda("
       "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(float)#1}, "
       "std::array<char*, 2ul> >(int, at::native::neg_kernel_cuda(at::TensorIteratorBase&)")
ANON = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::"
        "PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float>(...)")


def test_kernels_keep_their_name_and_identifying_functor() -> None:
    assert short(MUL) == "vectorized_elementwise_kernel<…MulFunctor…>"
    assert short(MEAN) == "reduce_kernel<…MeanOps…>"
    assert short(NEG) == "vectorized_elementwise_kernel<…neg_kernel_cuda…>"
    assert short(ANON).startswith("multi_tensor_apply_kernel<…")


def test_short_names_and_plain_names_are_left_alone() -> None:
    assert short("aten::mul") == "aten::mul"
    triton = "triton_red_fused_add_mean_mul_rsqrt_0" * 3
    assert short(triton) == triton


def test_a_narrow_width_cuts_the_kernel_not_the_functor() -> None:
    assert short(MUL, 24) == "vectorize…<…MulFunctor…>"  # 24 characters


@given(st.text(max_size=300), st.integers(20, 120))
def test_never_longer_than_the_name(name: str, width: int) -> None:
    assert len(short(name, width)) <= len(name)


def test_report_abbreviates_in_the_terminal_but_json_stays_exact() -> None:
    trace = str(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz")
    words = CliRunner().invoke(cli, ["report", trace]).stdout
    assert "longest gap of a device:" in words and "<…MulFunctor…>" in words
    assert max(map(len, words.splitlines())) < 200
    doc = json.loads(CliRunner().invoke(cli, ["report", trace, "--json"]).stdout)
    assert any("binary_internal::MulFunctor<float>" in (g["before"] or "")
               for g in doc["largest_gaps"])
