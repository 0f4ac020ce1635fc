"""The event table: the one place that names every column, its Arrow type and its meaning.

Every reader produces rows of this schema; every analysis reads it. Other modules refer to
columns through the constants below, never through string literals, so that a rename is
one edit here. The README's schema table is generated from ``COLUMNS`` (and a test keeps
the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

#: Bumped when a column is added, removed, renamed or changes meaning or type. Adding a
#: column is not a version change for readers of our files, but it is for our own strict
#: check, which compares the whole version string: a file of an older version is refused
#: with "convert it again" (``io.store``) and a rerun of convert redoes it
#: (``io.destination``). 3: ``model_id``, ``device_core`` and ``pcore`` added. 4: the
#: ``role`` value ``load`` (a Neuron NEFF load was ``runtime``).
SCHEMA_VERSION = "4"

#: A step's span: ``ProfilerStep#N``, written by torch.profiler's schedule once a step
#: (``record_function`` in the step's thread); group 1 is N.
STEP_PATTERN = r"^ProfilerStep#(\d+)$"

# Parquet key-value metadata keys (bytes, as pyarrow wants them).
META_PREFIX = b"neurontrace."  # every key below starts with it
META_SCHEMA_VERSION = b"neurontrace.schema_version"
META_PRODUCER = b"neurontrace.producer"
META_SOURCE = b"neurontrace.source"  # JSON: [{"path", "format", "sha256"?}, ...]
#: JSON: the trace's own top-level fields. Neuron inputs put theirs under ``neuron``:
#: ``tables`` (the side tables), ``profile_schema_version`` (``Metadata``'s),
#: ``device_profiles`` (a session's bound device folders) and, for a raw capture converted
#: here, ``tool_profile_schema`` (what ``neuron-explorer --show-profile-schema`` printed:
#: ``command``, ``version``, ``sha256``, ``chars``, ``text``, ``truncated``).
META_TRACE = b"neurontrace.trace"
META_WARNINGS = b"neurontrace.warnings"  # JSON: {code: count}
META_CLOCK = b"neurontrace.clock"  # JSON: how times were placed on one clock
META_OPTIONS = b"neurontrace.options"  # JSON: the conversion's options ({"rank": ...})

# Layers
FRAMEWORK = "framework"
RUNTIME = "runtime"
DEVICE = "device"
LAYERS = (FRAMEWORK, RUNTIME, DEVICE)

# Kinds
SPAN = "span"
INSTANT = "instant"
COUNTER = "counter"
KINDS = (SPAN, INSTANT, COUNTER)

# Roles: what a row is, whatever the backend (set by the readers; the analyses select
# rows by role, never by a backend's category or event names).
OPERATOR = "operator"
ANNOTATION = "annotation"
PYTHON = "python"
RUNTIME_CALL = "runtime"
COMPUTE = "compute"
TRANSFER = "transfer"
SYNC = "sync"
WAIT = "wait"
LOAD = "load"
OTHER = "other"
ROLES = (OPERATOR, ANNOTATION, PYTHON, RUNTIME_CALL, COMPUTE, TRANSFER, SYNC, WAIT, LOAD,
         OTHER)

# Transfer directions
H2D = "h2d"
D2H = "d2h"
D2D = "d2d"
P2P = "p2p"
DIRECTIONS = (H2D, D2H, D2D, P2P)

# Column names
ROW = "row"
LAYER = "layer"
CATEGORY = "category"
NAME = "name"
KIND = "kind"
ROLE = "role"
DIRECTION = "direction"
START_NS = "start_ns"
DUR_NS = "dur_ns"
SELF_NS = "self_ns"
PARENT = "parent"
DEPTH = "depth"
PID = "pid"
TID = "tid"
TRACK = "track"
DEVICE_COL = "device"
STREAM = "stream"
EXTERNAL_ID = "external_id"
CORRELATION = "correlation"
FLOW_IDS = "flow_ids"
FRAMEWORK_ROW = "framework_row"
LINK = "link"
BYTES = "bytes"
STEP = "step"
RANK = "rank"
INSTANCE_ID = "instance_id"
EXECUTION = "execution"
MODEL_ID = "model_id"
DEVICE_CORE = "device_core"
PCORE = "pcore"
ARGS = "args"

#: Columns whose values are ``row`` numbers (moved together when tables are stacked).
ROW_REFS = (ROW, PARENT, FRAMEWORK_ROW)


# Columns a reader may hand to the assembler that are not in the output: the original
# text of a non-numeric pid/tid (e.g. "Spans"), which the track name keeps.
PID_LABEL = "pid_label"
TID_LABEL = "tid_label"
LABELS = (PID_LABEL, TID_LABEL)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    doc: str


_STR = pa.string()
_I64 = pa.int64()

COLUMNS: tuple[Column, ...] = (
    Column(ROW, _I64, False, "Row number in this table, 0-based; what `parent` and "
           "`framework_row` refer to."),
    Column(LAYER, _STR, False, "`framework` (aten ops, dispatch, annotations, Python), "
           "`runtime` (CUDA/Neuron runtime and driver calls) or `device` (kernels, "
           "NeuronCore work, DMA, copies)."),
    Column(CATEGORY, _STR, True, "The source's own category (Kineto `cat`, e.g. "
           "`cpu_op`, `kernel`); null when the source gives none."),
    Column(NAME, _STR, False, "Event name, e.g. `aten::mul`, `ProfilerStep#3`."),
    Column(KIND, _STR, False, "`span` (has a duration), `instant` or `counter`."),
    Column(ROLE, _STR, False, "What the row is, set by the reader from the source's own "
           "categories and names: `operator` (an op the user's code ran: Kineto `cpu_op`, a "
           "Neuron framework op), `annotation` (`record_function` ranges, `ProfilerStep#N`, "
           "`gpu_user_annotation`), `python` (Python frames), `runtime` (runtime and driver "
           "calls on the host: launches, copy requests, ...), `compute` (device work: "
           "kernels, NeuronCore executions and instructions), `transfer` (data moved: "
           "device-side copies, DMA, memsets; on the `runtime` layer, the host call "
           "that copies, e.g. `cudaMemcpyAsync`, `nrt_tensor_write`), `sync` (host calls "
           "that synchronise with the device: "
           "`cudaStreamSynchronize`, `cudaStreamWaitEvent`, `kbl_exec_wait`, ...), `wait` "
           "(device-side waits: a stream waiting on an event, a collective's barrier), "
           "`load` (host calls that load a compiled model or graph onto the device: "
           "`nrt_load`, `nrt_load_collectives`) or "
           "`other` (counters, memory instants, markers, profiler ranges, summaries)."),
    Column(DIRECTION, _STR, True, "`h2d`, `d2h`, `d2d` or `p2p` for a transfer, and for "
           "the runtime call that requests one, where the trace says (a name such as "
           "`Memcpy HtoD`, an args field such as MTIA's `direction`, `nrt_tensor_write`); "
           "null otherwise."),
    Column(START_NS, _I64, False, "Start, integer nanoseconds, exact. Epoch-based when "
           "the trace gives `baseTimeNanoseconds` (or epoch times itself)."),
    Column(DUR_NS, _I64, False, "Duration in nanoseconds, exact; 0 for instants and "
           "counters."),
    Column(SELF_NS, _I64, True, "Span duration minus the spans directly nested in it on "
           "the same track (`key_averages()`'s self time before its merging of same-name "
           "children; clipped at 0); null for non-spans."),
    Column(PARENT, _I64, True, "`row` of the innermost span containing this span on the "
           "same track, by `torch.profiler`'s rule (a span that only partly overlaps is "
           "not a child); null at top level and for non-spans."),
    Column(DEPTH, _I64, True, "Nesting depth on the track (0 = top level); null for "
           "non-spans."),
    Column(PID, _I64, True, "Process id; null when the source uses a non-numeric id "
           "(kept in `track` and `args`)."),
    Column(TID, _I64, True, "Thread id (or GPU stream / queue lane); null when "
           "non-numeric."),
    Column(TRACK, _STR, False, "Readable lane name, from the source's metadata where "
           "present: `thread 8371 (python)`, `stream 7`, `nc 0 / tensor`."),
    Column(DEVICE_COL, _I64, True, "Accelerator index (GPU or NeuronCore) the event ran "
           "on or targets."),
    Column(STREAM, _I64, True, "Device stream or queue."),
    Column(EXTERNAL_ID, _I64, True, "Kineto `External id`: ties a CPU op to the runtime "
           "calls and device work it launched."),
    Column(CORRELATION, _I64, True, "Kineto `correlation`: ties a runtime launch to its "
           "device event."),
    Column(FLOW_IDS, pa.list_(_STR), True, "Flow arrows this event takes part in, as "
           "`<category>:<id>` (e.g. `ac2g:42`); events sharing an id are linked."),
    Column(FRAMEWORK_ROW, _I64, True, "`row` of the framework op that this runtime or "
           "device event belongs to (its launcher); null where no link was found."),
    Column(LINK, _STR, True, "How `framework_row` was found: `external_id`, "
           "`correlation`, `flow`, `nesting`, `execution` or `time`."),
    Column(BYTES, _I64, True, "Bytes moved or allocated, where the source says "
           "(`bytes`, `Bytes`, `size`)."),
    Column(STEP, _I64, True, "N of the `ProfilerStep#N` span the event starts in; for "
           "device work, the step of the op that launched it."),
    Column(RANK, _I64, False, "Distributed rank: `distributedInfo.rank`, else from the "
           "file name (`rank_3`, `rank3`), else 0."),
    Column(INSTANCE_ID, _STR, True, "Host instance that recorded the event (Neuron run "
           "folders)."),
    Column(EXECUTION, _STR, True, "One device execution seen on several physical cores "
           "(LNC=2) carries the same value on each row."),
    Column(MODEL_ID, _I64, True, "The Neuron model (NEFF) the row belongs to: Explorer's "
           "`model_id` (in `extra_attributes_json`, or the `DeviceProfileList` row a device "
           "folder is bound to); null where the source does not say. Flow ids are "
           "per-model counters, so `flow` links stay within one model."),
    Column(DEVICE_CORE, _I64, True, "Physical NeuronCore within the Neuron device: "
           "Explorer `SystemProfileEvents.pcore_idx`, legacy `device_core_idx`; null "
           "elsewhere. `device` is the logical NeuronCore (LNC=2 puts two physical cores "
           "in one)."),
    Column(PCORE, _I64, True, "Physical core within the logical NeuronCore `device` (0 "
           "or 1 with LNC=2): the `pcore_idx` of Explorer's `Instruction`, `DmaPacket` and "
           "`ActiveTime`; null elsewhere."),
    Column(ARGS, _STR, True, "Everything else the source recorded for the event, as "
           "JSON text, unchanged (integers wider than 64 bits stay exact)."),
)

NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

SCHEMA = pa.schema(
    [pa.field(c.name, c.type, nullable=c.nullable) for c in COLUMNS],
)


def reader_schema(*names: str) -> pa.Schema:
    """The Arrow schema of a reader's batches: output columns (types from ``COLUMNS``)
    and the ``LABELS``, in the order given."""
    types = {c.name: c.type for c in COLUMNS}
    return pa.schema([(n, pa.string() if n in LABELS else types[n]) for n in names])


def empty_table() -> pa.Table:
    return SCHEMA.empty_table()


def markdown_table() -> str:
    """The schema as the README shows it."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for c in COLUMNS:
        t = str(c.type).replace("list<item: string>", "list<string>")
        null = "" if c.nullable else ", never null"
        lines.append(f"| `{c.name}` | {t}{null} | {c.doc} |")
    return "\n".join(lines)
