"""Which rows the analyses select, by what the readers say a row is (``role``,
``direction``, ``layer``), never by a backend's category or event names.

What is left here is torch's own semantics (what ``key_averages()`` filters out, how it
names ``ProfilerStep#N``, which framework ops copy), not any backend's vocabulary.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S

# -- host side --------------------------------------------------------------------------

#: Roles of the host events ``key_averages()`` is built from (torch keeps every Kineto
#: event whose device type is CPU: operators, ``record_function`` ranges, Python frames
#: under ``with_stack``), whatever the backend that recorded them.
HOST_ROLES = (S.OPERATOR, S.ANNOTATION, S.PYTHON)
#: ... and the runtime calls torch's own profiler records on host threads (which is why a
#: kernel launch call has a row of its own in a GPU profile), but not those of another
#: tool's trace (a Neuron system trace's runtime calls are not in torch's table). Which
#: runtime rows torch records is torch's rule (``profiler_util.py``, torch 2.13), not a
#: role: the one list of category names the analyses keep.
TORCH_RUNTIME_CATEGORIES = (
    "cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver",
    "mtia_runtime", "xpu_runtime", "xpu_driver",
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

#: ``key_averages()`` shows every ``ProfilerStep#N`` (:data:`schema.STEP_PATTERN`) under
#: one name.
PROFILER_STEP_ALL = "ProfilerStep*"

#: Framework operators that copy a tensor, possibly to another device. Alone they do not
#: say which devices; they name the layer of a transfer found below them.
FRAMEWORK_COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to")

#: Ops torch's distributed package records inside every collective it runs
#: (``RECORD_PARAM_COMMS``: the collective's sizes and group, as args), not ops the user
#: called. The kernels they launch are the enclosing op's: ``c10d::allreduce_``, ...
COLLECTIVE_RECORDS = ("record_param_comms",)

# -- device side ------------------------------------------------------------------------

#: Roles of device rows that occupy the device.
WORK_ROLES = (S.COMPUTE, S.TRANSFER)

#: A Neuron capture can hold the same device time twice: each execution of a graph on a
#: NeuronCore (from the system trace) and, inside it, the instructions and DMA packets of
#: the device trace (these categories). Executions are the unit of work (what a framework
#: op launched); the instruction-level rows count as work only in a trace that has no
#: executions. The one rule ``role`` cannot say: it depends on what else the table holds.
DETAIL_CATEGORIES = ("Instruction", "DmaPacket", "instruction", "dma")

# -- copies -----------------------------------------------------------------------------

H2D, D2H, D2D, P2P = S.H2D, S.D2H, S.D2D, S.P2P
DIRECTIONS = S.DIRECTIONS

#: A transfer of at most this many bytes is a scalar or a handful of them (``tiny``): a
#: Python number such as ``eps`` living on the host, copied before each use.
TINY_BYTES = 64


# -- expressions --------------------------------------------------------------------------

def is_span() -> pl.Expr:
    return pl.col(S.KIND) == S.SPAN


def _role(*roles: str) -> pl.Expr:
    return pl.col(S.ROLE).is_in(roles)


def is_device_work() -> pl.Expr:
    """Device-layer spans that occupy the device (kernels, copies, NeuronCore
    executions), each piece of device time once (see ``DETAIL_CATEGORIES``)."""
    work = (pl.col(S.LAYER) == S.DEVICE) & is_span() & _role(*WORK_ROLES)
    detail = pl.col(S.CATEGORY).fill_null("").is_in(DETAIL_CATEGORIES)
    has_executions = (work & ~detail & (pl.col(S.ROLE) == S.COMPUTE)).any()
    return work & ~(detail & has_executions)


def work_key() -> pl.Expr:
    """Which piece of device work a row is (a string): its ``execution`` (one NeuronCore
    execution seen on several cores is one piece), else its own ``row``."""
    return pl.coalesce(pl.col(S.EXECUTION), pl.col(S.ROW).cast(pl.String))


def is_host_event() -> pl.Expr:
    """The host spans ``key_averages()`` is built from (before its name filter)."""
    return (
        pl.col(S.LAYER).is_in([S.FRAMEWORK, S.RUNTIME])
        & is_span()
        & (_role(*HOST_ROLES) | pl.col(S.CATEGORY).is_in(TORCH_RUNTIME_CATEGORIES))
    )


def is_op() -> pl.Expr:
    """Framework operators (spans)."""
    return (pl.col(S.LAYER) == S.FRAMEWORK) & is_span() & (pl.col(S.ROLE) == S.OPERATOR)


def is_sync() -> pl.Expr:
    """Spans that are synchronisations (a runtime sync call, a device-side wait)."""
    return is_span() & _role(S.SYNC, S.WAIT)


def is_copy() -> pl.Expr:
    """Runtime and device spans that move data: those the reader gave a direction, and
    the runtime calls that copy (role ``transfer``) whether or not it says which way
    (a device memset has no direction and is not a copy)."""
    return is_span() & (pl.col(S.LAYER) != S.FRAMEWORK) & (
        pl.col(S.DIRECTION).is_not_null()
        | ((pl.col(S.LAYER) == S.RUNTIME) & (pl.col(S.ROLE) == S.TRANSFER))
    )


def op_name() -> pl.Expr:
    """The name ``key_averages()`` shows: every ``ProfilerStep#N`` as ``ProfilerStep*``."""
    name = pl.col(S.NAME)
    return (
        pl.when(name.str.contains(S.STEP_PATTERN))
        .then(pl.lit(PROFILER_STEP_ALL))
        .otherwise(name)
    )
