"""What the analyses recognise in category and event names, in one declarative place.

The analyses read only schema columns; this module says which *values* of ``category``
and ``name`` mean an operator, device work, a wait, a synchronisation or a copy. A new
backend whose events fit the schema needs, at most, a line here.

Sources of the names: Kineto categories and CUDA/HIP runtime names as seen in the real
traces of ``../shared/corpus/kineto``; torch's ``profiler_util.py`` (torch 2.13) for what
``key_averages()`` keeps; the Neuron runtime vocabulary of ``docs/formats.md`` §5.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S

# -- host side --------------------------------------------------------------------------

#: Framework categories that are operators the user's code ran (``aten::mul``). Used for
#: "the outermost op the user called" (copies) and "a framework op is running" (gaps).
OP_CATEGORIES = ("cpu_op",)

#: Categories of the host events ``key_averages()`` is built from (torch keeps every
#: Kineto event whose device type is CPU: operators, ``record_function`` ranges, Python
#: frames under ``with_stack``, and the runtime calls made on host threads, which is why
#: ``cudaLaunchKernel`` has a row of its own in a CUDA profile's table).
HOST_CATEGORIES = (
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "privateuse1_runtime",
    "privateuse1_driver",
    "mtia_runtime",
    "xpu_runtime",
    "xpu_driver",
)

#: Names torch drops before building its event tree (``_filter_name``): they neither
#: appear in ``key_averages()`` nor count as anyone's children.
KEY_AVERAGES_SKIPPED = (
    "[memory]",
    "[OutOfMemory]",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
)

#: ``key_averages()`` shows every ``ProfilerStep#N`` under one name.
PROFILER_STEP_PATTERN = r"^ProfilerStep#\d+$"
PROFILER_STEP_ALL = "ProfilerStep*"

#: Framework operators that copy a tensor, possibly to another device. Alone they do not
#: say which devices; they name the layer of a transfer found below them.
FRAMEWORK_COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to")

# -- device side ------------------------------------------------------------------------

#: Device-layer categories that are not work: ranges drawn over kernels, waits, and
#: Neuron Explorer's ``ActiveTime`` (busy intervals merged from the other rows).
DEVICE_NOT_WORK_CATEGORIES = (
    "gpu_user_annotation", "cuda_profiler_range", "cuda_sync", "ActiveTime",
)

#: A Neuron capture can hold the same device time twice: each execution of a graph on a
#: NeuronCore (``nc_exec_running``, from the system trace) and, inside it, the
#: instructions and DMA packets of the device trace. Executions are the unit of work
#: (what a framework op launched); the instruction-level rows count as work only in a
#: trace that has no executions.
EXECUTION_NAMES = ("nc_exec_running",)
DEVICE_DETAIL_CATEGORIES = ("Instruction", "DmaPacket", "instruction", "dma")

#: Device-layer event names that are waits, whatever their category (MTIA ``event_wait``;
#: Neuron ``cc_exec_barrier``, a collective waiting for its peers).
DEVICE_WAIT_NAMES = ("event_wait", "cc_exec_barrier")

#: Neuron hardware events that mark a moment or a condition rather than occupy the
#: NeuronCore (formats.md §5): clock sync points, notifications, errors, model switches.
DEVICE_MARKER_NAMES = ("timestamp_sync_point", "hw_notify", "numerical_err", "nrt_model_switch")

#: Categories whose events are synchronisations the device or the host waits on.
SYNC_CATEGORIES = ("cuda_sync",)

#: Runtime calls that block on, or order, device work: CUDA/HIP ``*Synchronize``,
#: ``*StreamWaitEvent``, MTIA ``synchronize*`` / ``waitOnEvent``, Neuron ``kbl_exec_wait``
#: (the host blocked waiting on the device).
SYNC_NAME_PATTERN = r"(?i)synchroniz|waitevent|waitonevent|^kbl_exec_wait$"

# -- copies -----------------------------------------------------------------------------

H2D, D2H, D2D = "h2d", "d2h", "d2d"
DIRECTIONS = (H2D, D2H, D2D)

#: Neuron runtime events that move a tensor between host and device (formats.md §5).
NEURON_COPIES: dict[str, str] = {
    "nrt_tensor_write": H2D,
    "tensor_write": H2D,
    "dmem_buf_copyin": H2D,
    "nrt_tensor_read": D2H,
    "tensor_read": D2H,
    "dmem_buf_copyout": D2H,
}

#: Kineto's device copies (``Memcpy HtoD (Pageable -> Device)``, ...).
COPY_CATEGORIES = ("gpu_memcpy",)

#: Runtime (and PrivateUse1) calls that copy: ``cudaMemcpyAsync``, ``hipMemcpyWithStream``,
#: ``cuMemcpyHtoD``, MTIA ``enqueueCommand memcpyHtoDAsync``, a PrivateUse1 ``copy``.
RUNTIME_COPY_PATTERN = r"(?i)memcpy"
PRIVATEUSE1_CATEGORIES = ("privateuse1_runtime", "privateuse1_driver")
PRIVATEUSE1_COPY_PATTERN = r"(?i)copy|memcpy"

#: Direction from the words in a copy's name, first match wins.
DIRECTION_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?i)htod|h2d|hosttodevice|host_to_device|copyin", H2D),
    (r"(?i)dtoh|d2h|devicetohost|device_to_host|copyout", D2H),
    (r"(?i)dtod|d2d|devicetodevice|device_to_device|ptop|peer", D2D),
)

#: A transfer of at most this many bytes is a scalar or a handful of them (``tiny``): a
#: Python number such as ``eps`` living on the host, copied before each use.
TINY_BYTES = 64


# -- expressions --------------------------------------------------------------------------

def is_span() -> pl.Expr:
    return pl.col(S.KIND) == S.SPAN


def is_device_work() -> pl.Expr:
    """Device-layer spans that occupy the device (kernels, copies, NeuronCore executions),
    each piece of device time once (see ``DEVICE_DETAIL_CATEGORIES``)."""
    category = pl.col(S.CATEGORY).fill_null("")
    device = pl.col(S.LAYER) == S.DEVICE
    has_executions = (device & pl.col(S.NAME).is_in(EXECUTION_NAMES)).any()
    return (
        device
        & is_span()
        & ~category.is_in(DEVICE_NOT_WORK_CATEGORIES)
        & ~pl.col(S.NAME).is_in(DEVICE_WAIT_NAMES)
        & ~pl.col(S.NAME).is_in(DEVICE_MARKER_NAMES)
        & ~(category.is_in(DEVICE_DETAIL_CATEGORIES) & has_executions)
    )


def is_op() -> pl.Expr:
    """Framework operators (spans)."""
    return (pl.col(S.LAYER) == S.FRAMEWORK) & is_span() & pl.col(S.CATEGORY).is_in(OP_CATEGORIES)


def is_sync() -> pl.Expr:
    """Spans that are synchronisations (a runtime sync call, a device-side wait)."""
    return is_span() & (
        pl.col(S.CATEGORY).fill_null("").is_in(SYNC_CATEGORIES)
        | ((pl.col(S.LAYER) == S.RUNTIME) & pl.col(S.NAME).str.contains(SYNC_NAME_PATTERN))
        | ((pl.col(S.LAYER) == S.DEVICE) & pl.col(S.NAME).is_in(DEVICE_WAIT_NAMES))
    )


def is_copy() -> pl.Expr:
    """Runtime and device spans that move data between host and device (or devices)."""
    cat = pl.col(S.CATEGORY).fill_null("")
    name = pl.col(S.NAME)
    return (
        is_span()
        & (pl.col(S.LAYER) != S.FRAMEWORK)
        & (
            cat.is_in(COPY_CATEGORIES)
            | name.is_in(list(NEURON_COPIES))
            | ((pl.col(S.LAYER) == S.RUNTIME) & name.str.contains(RUNTIME_COPY_PATTERN))
            | (cat.is_in(PRIVATEUSE1_CATEGORIES) & name.str.contains(PRIVATEUSE1_COPY_PATTERN))
        )
    )


def direction() -> pl.Expr:
    """``h2d`` / ``d2h`` / ``d2d`` from a copy's name; null where the name does not say."""
    name = pl.col(S.NAME)
    out: pl.Expr = name.replace_strict(NEURON_COPIES, default=None, return_dtype=pl.String)
    for pattern, d in DIRECTION_PATTERNS:
        out = out.fill_null(pl.when(name.str.contains(pattern)).then(pl.lit(d)))
    return out


def op_name() -> pl.Expr:
    """The name ``key_averages()`` shows: every ``ProfilerStep#N`` as ``ProfilerStep*``."""
    name = pl.col(S.NAME)
    return (
        pl.when(name.str.contains(PROFILER_STEP_PATTERN))
        .then(pl.lit(PROFILER_STEP_ALL))
        .otherwise(name)
    )
