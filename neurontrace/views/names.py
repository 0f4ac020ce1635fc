"""Long C++ kernel names, abbreviated for the terminal (JSON and files keep them exact).

A CUDA kernel's name is its whole signature::

    void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<
    c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::
    MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<...

What identifies it is the kernel (``vectorized_elementwise_kernel``) and the most deeply
nested functor or op in its template arguments (``MulFunctor``), so that is what stays::

    vectorized_elementwise_kernel<…MulFunctor…>

Names that fit, or that are not C++ signatures (``aten::mul``, Triton kernels), are
left alone (a table may still cut them in the middle).
"""

from __future__ import annotations

import re

WIDTH = 60

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Template arguments that say nothing about which kernel it is.
_NOISE = frozenset("""
    void bool char short int long unsigned signed float double half const volatile
    struct class typename auto size_t int8_t int16_t int32_t int64_t uint8_t uint16_t
    uint32_t uint64_t ul u l f array tuple pair lambda std c10 at native detail cuda
    cub thrust Half BFloat16 bfloat16 complex Float8_e4m3fn Float8_e5m2 TensorIteratorBase
    OffsetCalculator IntDivider TrivialOffsetCalculator LoadWithoutCast StoreWithoutCast
    LoadWithCast StoreWithCast func_wrapper_t TensorIterator true false anonymous
    namespace operator
""".split())


def short(name: str, width: int = WIDTH) -> str:
    """``name`` shortened to its kernel and identifying template argument when it is a
    long C++ signature; otherwise unchanged."""
    if len(name) <= width or "<" not in name and "(" not in name:
        return name
    s = name.strip().replace("(anonymous namespace)::", "")
    s = re.sub(r"^(?:void|[\w:]+\*?)\s+(?=[\w:]+[<(])", "", s)  # return type
    s = _drop_arguments(s)
    s = re.sub(r"\b[A-Za-z_]\w*::", "", s)  # namespaces
    lt = s.find("<")
    if lt < 0:
        return s
    base = s[:lt]
    key = _deepest(s[lt:])
    tail = f"<…{key}…>" if key else "<…>"
    if len(base) + len(tail) > width and width - len(tail) - 1 >= 4:
        base = base[: width - len(tail) - 1] + "…"  # the kernel's start, then its functor
    return base + tail


def _drop_arguments(s: str) -> str:
    """Cut the function's parameter list: the first ``(`` outside template brackets."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


def _deepest(args: str) -> str | None:
    """The first of the most deeply nested identifiers that is not noise (parameter
    lists inside the template arguments, ``(TensorIterator&)``, are skipped)."""
    best: tuple[int, str] | None = None
    depth = parens = 0
    i = 0
    while i < len(args):
        ch = args[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(":
            parens += 1
        elif ch == ")":
            parens -= 1
        m = _IDENT.match(args, i) if not parens else None
        if m:
            word = m.group()
            if word not in _NOISE and not word[0].isdigit() and (
                    best is None or depth > best[0]):
                best = (depth, word)
            i = m.end()
            continue
        i += 1
    return best[1] if best else None
