"""What each Kineto row is (``role``) and which way a transfer goes (``direction``).

The only place that knows Kineto's categories and the CUDA/HIP/MTIA runtime's names, as
seen in the real traces of ``../shared/corpus/kineto`` and in ``docs/formats.md``:

=====================  ============================================================
role                   Kineto rows
=====================  ============================================================
``operator``           ``cpu_op``
``annotation``         ``user_annotation`` (``ProfilerStep#N`` included),
                       ``gpu_user_annotation``
``python``             ``python_function``
``runtime``            runtime and driver calls (``cuda_runtime``, ``cuda_driver``,
                       ``privateuse1_*``, ``mtia_runtime``, ``xpu_*``, ...)
``transfer``           those of them that copy (``*memcpy*``, a PrivateUse1 ``copy``)
``sync``               those of them that synchronise: ``*Synchronize*``,
                       ``*StreamWaitEvent``, MTIA ``synchronize*``, ``waitOnEvent``
``compute``            other device spans: ``kernel``, MTIA ``mtia_ccp_events``
``transfer``           on the device: ``gpu_memcpy``, ``gpu_memset``, and any device
                       row whose ``args.direction`` names a direction (MTIA's
                       ``dma_request``, whatever its name or category)
``wait``               ``cuda_sync`` (``Stream Wait Event``, ``Stream Sync``, ...),
                       MTIA ``event_wait``
``other``              counters, ``cpu_instant_event`` (``[memory]``), ``Trace``,
                       ``cuda_profiler_range``, rows without a category
=====================  ============================================================

``direction``: of a device row from its ``args.direction`` (MTIA: ``HOST_TO_DEVICE``,
...), else from its name (``Memcpy HtoD``, ``DtoH``, ``DtoD``, ``PtoP``); of a runtime
call that copies (its name holds ``memcpy``, or a PrivateUse1 call ``copy``) from its
name (``memcpyHtoDAsync``) or its ``args.kind`` (``cudaMemcpyKind``: 1 host to device,
2 device to host, 3 device to device).
"""

from __future__ import annotations

import re

import polars as pl

from neurontrace import schema as S

#: Kineto's device-layer categories and the role of their rows (but see :func:`role`: a
#: wait's name, or a direction in a row's args, comes first). CUPTI profiler ranges (a
#: kernel's counters measured over a range, not its run) are not device work.
DEVICE_ROLES = {"kernel": S.COMPUTE, "mtia_ccp_events": S.COMPUTE, "gpu_memcpy": S.TRANSFER,
                "gpu_memset": S.TRANSFER, "gpu_user_annotation": S.ANNOTATION,
                "cuda_sync": S.WAIT, "cuda_profiler_range": S.OTHER}
#: Framework-layer categories and the role of their rows (any other: other).
FRAMEWORK_ROLES = {"cpu_op": S.OPERATOR, "user_annotation": S.ANNOTATION,
                   "gpu_user_annotation": S.ANNOTATION, "python_function": S.PYTHON}
#: Any category not a device one that starts with a runtime's prefix (``cuda_runtime``,
#: ``cuda_driver``, ``privateuse1_runtime``, ``mtia_runtime``, ...) is the runtime layer;
#: the rest, unknown categories included, the framework layer.
RUNTIME_PREFIXES = ("privateuse1_", "cuda_", "hip_", "xpu_", "mtia_")
#: Device event names that are waits, whatever their category (MTIA).
WAIT_NAMES = ("event_wait",)
#: Runtime calls that block on, or order, device work.
SYNC_NAME_PATTERN = r"(?i)synchroniz|waitevent|waitonevent"
#: Runtime calls that copy: ``cudaMemcpyAsync``, ``hipMemcpyWithStream``, MTIA
#: ``enqueueCommand memcpyHtoDAsync``; a PrivateUse1 backend's ``copy``.
RUNTIME_COPY_PATTERN = r"(?i)memcpy"
PRIVATEUSE1_CATEGORIES = ("privateuse1_runtime", "privateuse1_driver")
PRIVATEUSE1_COPY_PATTERN = r"(?i)copy|memcpy"

#: Direction from the words in a copy's name, first match wins.
DIRECTION_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?i)htod|h2d|hosttodevice|host_to_device", S.H2D),
    (r"(?i)dtoh|d2h|devicetohost|device_to_host", S.D2H),
    (r"(?i)ptop|p2p|peer", S.P2P),
    (r"(?i)dtod|d2d|devicetodevice|device_to_device", S.D2D),
)
#: MTIA ``dma_request``'s ``args.direction``.
ARG_DIRECTIONS = {"HOST_TO_DEVICE": S.H2D, "DEVICE_TO_HOST": S.D2H,
                  "DEVICE_TO_DEVICE": S.D2D, "PEER_TO_PEER": S.P2P}
#: ``cudaMemcpyKind`` in a runtime call's ``args.kind``.
KIND_DIRECTIONS = {"1": S.H2D, "2": S.D2H, "3": S.D2D}


def role(layer: pl.Expr, category: pl.Expr, name: pl.Expr, kind: pl.Expr,
         arg_direction: pl.Expr) -> pl.Expr:
    """The ``role`` of each row from its layer (already mapped from the category), its
    Kineto category, name and kind, and the direction its args give
    (:func:`arg_direction`) (see the module docstring)."""
    cat = category.fill_null("")
    moves = arg_direction.is_not_null()
    by_category = cat.replace_strict(DEVICE_ROLES, default=S.COMPUTE, return_dtype=pl.String)
    device = (
        pl.when(name.is_in(WAIT_NAMES)).then(pl.lit(S.WAIT))
        .when(moves & (by_category != S.WAIT)).then(pl.lit(S.TRANSFER))
        .otherwise(by_category)
    )
    copies = name.str.contains(RUNTIME_COPY_PATTERN) | (
        cat.is_in(PRIVATEUSE1_CATEGORIES) & name.str.contains(PRIVATEUSE1_COPY_PATTERN))
    runtime = (
        pl.when(name.str.contains(SYNC_NAME_PATTERN)).then(pl.lit(S.SYNC))
        .when(copies).then(pl.lit(S.TRANSFER))
        .otherwise(pl.lit(S.RUNTIME_CALL))
    )
    framework = cat.replace_strict(FRAMEWORK_ROLES, default=S.OTHER, return_dtype=pl.String)
    return (
        pl.when(kind == S.COUNTER).then(pl.lit(S.OTHER))
        .when(layer == S.DEVICE).then(device)
        .when(layer == S.RUNTIME).then(runtime)
        .otherwise(framework)
    )


def layer_of(category: str) -> str:
    """The layer of a Kineto category (see :data:`RUNTIME_PREFIXES`)."""
    if category in DEVICE_ROLES:
        return S.DEVICE
    return S.RUNTIME if category.startswith(RUNTIME_PREFIXES) else S.FRAMEWORK


def _from_name(name: pl.Expr) -> pl.Expr:
    out: pl.Expr = pl.lit(None, pl.String)
    for pattern, d in reversed(DIRECTION_PATTERNS):
        out = pl.when(name.str.contains(pattern)).then(pl.lit(d)).otherwise(out)
    return out


def arg_text(args: pl.Expr, key: str, value: str = "[A-Za-z0-9_]+", unit: str = ""
             ) -> pl.Expr:
    """The text of the value of ``args`` key ``key`` (null where absent): a number, or a
    string without its quotes, that ``value`` matches whole; with ``unit``, a quoted value
    may end in that unit (``"14139908 bytes"``), left out.

    The quoted key followed by ``:`` only occurs as a key (inside a string value its
    quotes would be escaped), and the value must end at ``,`` or ``}`` (so ``1.5`` or
    ``1e3`` are not read as 1). Literal first and ASCII-only keep the regex fast, but an
    absent key still costs a scan of every row: where a whole chunk may lack it, a
    literal search for it first is faster (the link keys in
    :mod:`neurontrace.readers.kineto.columns`, measured there).
    """
    ws = "[ \t\r\n]*"
    unit = f"(?:{unit})?" if unit else ""
    return args.str.extract(rf'(?-u)"{re.escape(key)}"{ws}:{ws}"?({value}){unit}"?{ws}[,}}]', 1)


def arg_direction(args: pl.Expr) -> pl.Expr:
    """The direction a row's ``args.direction`` names (:data:`ARG_DIRECTIONS`), else null."""
    return arg_text(args, "direction").replace_strict(
        ARG_DIRECTIONS, default=None, return_dtype=pl.String)


def direction(role_: pl.Expr, layer: pl.Expr, name: pl.Expr, args: pl.Expr,
              moved: pl.Expr) -> pl.Expr:
    """``direction`` of transfers and of the runtime calls that request them; ``moved``:
    the direction the args of device rows give (:func:`arg_direction`)."""
    copy_call = (layer == S.RUNTIME) & (role_ == S.TRANSFER)
    by_kind = arg_text(args, "kind").replace_strict(
        KIND_DIRECTIONS, default=None, return_dtype=pl.String)
    return (
        pl.when(copy_call).then(pl.coalesce(_from_name(name), by_kind))
        .when(role_ == S.TRANSFER)
        .then(pl.coalesce(moved, _from_name(name)))
    )


def classify(frame: pl.DataFrame) -> pl.DataFrame:
    """``role`` and ``direction`` of rows having ``layer, category, name, kind`` and
    ``args``."""
    layer, name, args = pl.col(S.LAYER), pl.col(S.NAME), pl.col(S.ARGS)
    moved = pl.when(layer == S.DEVICE).then(arg_direction(args))
    roles = frame.select(
        role(layer, pl.col(S.CATEGORY), name, pl.col(S.KIND), moved).alias(S.ROLE)).to_series()
    # The direction of the transfers alone: direction() over every row took 4 times as
    # long as role() (its name patterns run on every name).
    where = (roles == S.TRANSFER).arg_true()
    found = frame[where].with_columns(roles.gather(where)).select(
        direction(pl.col(S.ROLE), layer, name, args, moved)).to_series()
    out = pl.Series(S.DIRECTION, [None] * frame.height, pl.String).scatter(where, found)
    return pl.DataFrame([roles, out])
