"""``framework_row`` and ``link``: the framework op each runtime and device row belongs to.

First match wins:

1. ``external_id``: the framework op carrying the same Kineto ``External id`` (only when
   the trace uses it as a link: see :func:`_survey`); of several, an op
   (``cpu_op``) before an annotation, then the first;
2. ``nesting``: for runtime calls, the innermost framework op enclosing them on the same
   thread;
3. ``correlation``: the runtime call with the same ``correlation``, through its link;
4. ``flow``: a framework row, or a row linked by 1-3, sharing a flow arrow; followed over
   a few hops (framework dispatch -> runtime -> hardware); within one ``model_id`` where
   rows carry one (Neuron flow ids are per-model counters: see :func:`_flows`);
5. ``execution``: another row of the same device ``execution`` that has a link (the
   instructions of an execution belong to whoever started it; runtime rows first);
6. ``time``: for a device execution still unlinked, the latest linked runtime call on
   the same ``device`` that started at or before the execution's first row::

       thread   |---- aten::mul ----|
                   |- nrt_execute -|           runtime: nesting -> aten::mul
       nc 0                  |== exec 7 ==|    device rows of exec 7: time -> aten::mul

A kernel may run long after its op, so the rules join rows anywhere in the trace. They
are computed from tables with one entry per link key (External id, correlation, flow
id, execution), built in passes over the runtime and device rows a chunk at a time:
memory follows the number of keys, not of rows. Where several rows could give a key's
entry, the first row (by ``row``) does. :mod:`neurontrace.table.sweep` hands in one chunk per
row range (one for a trace held in memory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import polars as pl

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics

#: The columns of the runtime and device rows handed in: ``_nest_row`` is the nearest
#: framework span enclosing the row on its track, ``_nest_ext`` that span's External id;
#: ``model_id`` may be left out (read as null: a trace without models).
COLUMNS = (S.ROW, S.LAYER, S.START_NS, S.EXTERNAL_ID, S.CORRELATION, S.FLOW_IDS,
           S.DEVICE_COL, S.EXECUTION, S.MODEL_ID, S.ROLE, "_nest_row", "_nest_ext")
#: Device rows that are not work a launch started (a CUPTI profiler range, a device-side
#: annotation): without a framework op they are not ``unlinked``.
NOT_LAUNCHED = (S.ANNOTATION, S.OTHER)
#: Hops followed along flow arrows (framework dispatch -> runtime -> hardware is two).
FLOW_HOPS = 4

#: The rules in order: each one's name (``link``) and the column of the row it finds.
RULES = {"external_id": "_ext_row", "nesting": "_nest_row", "correlation": "_corr_row",
         "flow": "_flow_row", "execution": "_exec_row", "time": "_time_row"}

_I64 = pl.Int64
Chunks = Callable[[], Iterator[pl.DataFrame]]
#: The framework rows whose External id is in the given ids: row, category, external_id.
Framework = Callable[[pl.Series], pl.DataFrame]
#: The rules' tables by the column each gives (see :func:`_lookup`).
Tables = dict[str, pl.DataFrame]


def links(chunks: Chunks, framework: Framework, fw_flows: pl.DataFrame, diag: Diagnostics
          ) -> Iterator[pl.DataFrame]:
    """``row, layer, framework_row, link`` of the rows of ``chunks()`` (runtime and device
    rows, :data:`COLUMNS`; one chunk at least), a chunk at a time; ``chunks`` may be
    called once per pass.
    ``framework`` gives the framework rows named by External id; ``fw_flows`` (row,
    flow_ids) the framework rows with flow arrows."""

    def rows() -> Iterator[pl.DataFrame]:
        return map(_with_model, chunks())

    refs, has_exec, use_ext = _survey(rows)
    by: Tables = {}
    if use_ext:  # External id links ops to runtime calls (see _survey)
        ops_first = framework(refs).sort(pl.col(S.CATEGORY) != "cpu_op", S.ROW)
        by["_ext_row"] = ops_first.unique(S.EXTERNAL_ID, keep="first", maintain_order=True
                                          ).select(S.EXTERNAL_ID, _ext_row=S.ROW)
    by["_corr_row"] = _correlations(rows, by)
    by["_flow_row"] = _flows(rows, by, fw_flows)
    if has_exec:
        by.update(_executions(rows, by))
    unlinked = 0
    for c in rows():
        c = _linked(c, by)
        out = c.select(
            S.ROW, S.LAYER,
            pl.coalesce("_linked", "_exec_row", "_time_row").alias(S.FRAMEWORK_ROW),
            pl.coalesce(pl.when(pl.col(col).is_not_null()).then(pl.lit(rule))
                        for rule, col in RULES.items()).alias(S.LINK),
        )
        # Runtime calls outside any op are normal (the profiler's own synchronise
        # at stop, background threads polling events), and so are device rows that
        # no launch started: only device work counts.
        work = (pl.col(S.LAYER) == S.DEVICE) & ~pl.col(S.ROLE).cast(pl.String).is_in(
            NOT_LAUNCHED).fill_null(False)
        unlinked += int((c.select(work).to_series()
                         & out.get_column(S.FRAMEWORK_ROW).is_null()).sum())
        yield out
    if unlinked:
        diag.warn(
            "unlinked",
            f"{unlinked} device row(s) have no framework op (no External id, "
            "correlation, flow or execution links them to a launch)",
            unlinked,
        )


def _survey(chunks: Chunks) -> tuple[pl.Series, bool, bool]:
    """The External ids the rows carry, whether any has an ``execution``; and
    whether the trace uses ``External id`` to tie runtime calls to their op.

    Current Kineto gives a runtime call the External id of the op enclosing it; some
    older traces number runtime calls and kernels by their correlation instead,
    where a match with an op's External id is a coincidence. Decided from the
    runtime calls that sit inside an op: most must carry that op's External id.
    Not a warning: it is how those traces are written (3 of the 9 corpus traces),
    and nesting and correlation link them completely.
    """
    refs, calls, same, known, has_exec = [], 0, 0, 0, False
    for c in chunks():
        refs.append(c.get_column(S.EXTERNAL_ID).drop_nulls().unique())
        has_exec = has_exec or c.get_column(S.EXECUTION).is_not_null().any()
        rt = c.filter((pl.col(S.LAYER) == S.RUNTIME) & pl.col(S.EXTERNAL_ID).is_not_null()
                      & pl.col("_nest_row").is_not_null())
        agree = rt.get_column(S.EXTERNAL_ID) == rt.get_column("_nest_ext")
        calls += rt.height
        same += int(agree.sum() or 0)
        known += agree.len() - agree.null_count()
    return pl.concat(refs).unique(), has_exec, not (calls and known and same / known < 0.5)


def _known(c: pl.DataFrame, by: Tables) -> pl.DataFrame:
    """``c`` with rules 1-3: ``_ext_row``, ``_nest_row`` (runtime rows), ``_corr_row``."""
    c = _lookup(c, by, "_ext_row").with_columns(
        pl.when(pl.col(S.LAYER) == S.RUNTIME).then("_nest_row").alias("_nest_row"))
    return _lookup(c, by, "_corr_row")


def _correlations(chunks: Chunks, by: Tables) -> pl.DataFrame:
    """``correlation, _corr_row``: per correlation, the link of its first runtime call
    (by ``row``) that rules 1-2 link."""
    first = pl.coalesce("_ext_row", "_nest_row")
    parts = [
        _known(c, by).filter(
            (pl.col(S.LAYER) == S.RUNTIME) & pl.col(S.CORRELATION).is_not_null()
            & first.is_not_null()
        ).select(S.ROW, S.CORRELATION, first.alias("_corr_row"))
        for c in chunks()
    ]
    return pl.concat(parts).sort(S.ROW, maintain_order=True).unique(
        S.CORRELATION, keep="first", maintain_order=True).select(S.CORRELATION, "_corr_row")


def _flows(chunks: Chunks, by: Tables, fw_flows: pl.DataFrame) -> pl.DataFrame:
    """Rule 4: rows linked by 1-3 (and framework rows) are the sources of their flow
    ids; rows still unlinked take a source's link, over a few hops.

    Flow ids are scoped by ``model_id`` where rows carry one (Neuron: a flow id is a
    per-model counter, so two NEFFs reuse them): a row of model M takes a source of
    model M, else a source of no model (a framework op), never one of another model;
    a row of no model takes any source, as in a trace without models. A row reached
    through a source of model M is a source of model M in turn."""
    known = pl.coalesce("_ext_row", "_nest_row", "_corr_row")
    fw = fw_flows.select(
        S.ROW, pl.col(S.ROW).alias("_flow_row"), pl.col(S.FLOW_IDS).alias("_fid"),
        pl.lit(None, _I64).alias("_model")).explode("_fid")
    sources = [_first_source(fw)]
    todo_parts = []
    for c in chunks():
        c = _known(c, by).filter(pl.col(S.FLOW_IDS).is_not_null())
        sources.append(_first_source(c.filter(known.is_not_null()).select(
            S.ROW, known.alias("_flow_row"), pl.col(S.FLOW_IDS).alias("_fid"),
            pl.col(S.MODEL_ID).alias("_model")).explode("_fid")))
        todo_parts.append(c.filter(known.is_null()).select(
            S.ROW, pl.col(S.FLOW_IDS).alias("_fid"), pl.col(S.MODEL_ID).alias("_model")))
    hops = [pl.DataFrame(schema={S.ROW: _I64, "_flow_row": _I64})]
    todo = (pl.concat(todo_parts).sort(S.ROW, maintain_order=True).explode("_fid")
            .with_row_index("_i"))
    # only the flow ids of rows left to link can be followed: the sources of the
    # others (on CUDA, every launch) are dropped before they are combined, so memory
    # follows the rows rule 4 links, not every flow arrow of the trace
    wanted = pl.col("_fid").is_in(todo.get_column("_fid").drop_nulls().unique().implode())
    src = _first_source(pl.concat([s.filter(wanted) for s in sources])
                        ).with_columns(_gen=pl.lit(0, _I64))
    for gen in range(1, FLOW_HOPS + 1):
        hit = _flow_hits(todo, src)
        if hit.height == 0:
            break
        hops.append(hit.select(S.ROW, "_flow_row"))
        # a row reached through a model's source is that model's source in turn
        reached = todo.join(hit, on=S.ROW, maintain_order="left").select(
            S.ROW, "_flow_row", "_fid", pl.coalesce("_model", "_via").alias("_model"))
        new = _first_source(reached.join(src, on=["_fid", "_model"], how="anti",
                                         nulls_equal=True))
        src = pl.concat([src, new.with_columns(_gen=pl.lit(gen, _I64))])
        todo = todo.join(hit, on=S.ROW, how="anti", maintain_order="left")
    return pl.concat(hops)


def _linked(c: pl.DataFrame, by: Tables) -> pl.DataFrame:
    """``c`` with rules 1-4 (``_linked``), and 5-6 once known."""
    c = _lookup(_known(c, by), by, "_flow_row").with_columns(
        pl.coalesce("_ext_row", "_nest_row", "_corr_row", "_flow_row").alias("_linked"))
    unlinked = pl.col("_linked").is_null()
    c = _lookup(c, by, "_exec_row").with_columns(
        pl.when(unlinked).then("_exec_row").alias("_exec_row"))
    return _lookup(c, by, "_time_row").with_columns(
        pl.when(unlinked & pl.col("_exec_row").is_null() & (pl.col(S.LAYER) == S.DEVICE))
        .then("_time_row").alias("_time_row"))


def _executions(chunks: Chunks, by: Tables) -> Tables:
    """Rules 5 and 6, per execution: its first linked row (runtime rows first, then
    by start); else the latest linked runtime call on its device at its start."""
    owners, calls = [], []
    for c in chunks():
        c = _linked(c, by).filter(pl.col("_linked").is_not_null())
        owners.append(c.filter(pl.col(S.EXECUTION).is_not_null()).select(
            S.EXECUTION, S.ROW, "_linked",
            _later=pl.col(S.LAYER) != S.RUNTIME, _t=S.START_NS))
        calls.append(c.filter((pl.col(S.LAYER) == S.RUNTIME)
                              & pl.col(S.DEVICE_COL).is_not_null())
                     .select(S.DEVICE_COL, _t=S.START_NS, _time_row="_linked"))
    by = {**by, "_exec_row": pl.concat(owners).sort("_later", "_t", S.ROW).unique(
        S.EXECUTION, keep="first", maintain_order=True).select(S.EXECUTION, _exec_row="_linked")}
    opened = []
    for c in chunks():
        c = _linked(c, by).filter(
            (pl.col(S.LAYER) == S.DEVICE) & pl.col(S.EXECUTION).is_not_null()
            & pl.col("_linked").is_null() & pl.col("_exec_row").is_null())
        opened.append(c.sort(S.ROW).group_by(S.EXECUTION, maintain_order=True).agg(
            pl.col(S.START_NS).min().alias("_t"),
            pl.col(S.DEVICE_COL).drop_nulls().first(),
            pl.col(S.ROW).filter(pl.col(S.DEVICE_COL).is_not_null()).min().alias("_at"),
        ))
    execs = pl.concat(opened).group_by(S.EXECUTION).agg(
        pl.col("_t").min(), pl.col(S.DEVICE_COL).sort_by("_at", nulls_last=True).first()
    ).drop_nulls(S.DEVICE_COL).sort("_t")
    every = pl.concat(calls).sort("_t")
    if execs.height and every.height:
        by["_time_row"] = execs.join_asof(
            every, on="_t", by=S.DEVICE_COL, strategy="backward", check_sortedness=False
        ).select(S.EXECUTION, "_time_row").drop_nulls()
    return by


def _lookup(c: pl.DataFrame, by: Tables, value: str) -> pl.DataFrame:
    """``c`` with ``value`` from its table ``by[value]`` (``key, value``) by ``key`` (no
    table: all null)."""
    table = by.get(value)
    if table is None:
        return c.with_columns(pl.lit(None, _I64).alias(value))
    return c.join(table, on=table.columns[0], how="left", maintain_order="left")


def _with_model(c: pl.DataFrame) -> pl.DataFrame:
    """``c`` with a ``model_id`` column (null when the trace has none: the sweep keeps the
    column only where the reader gave it)."""
    return c if S.MODEL_ID in c.columns else c.with_columns(pl.lit(None, _I64).alias(S.MODEL_ID))


def _first_source(entries: pl.DataFrame) -> pl.DataFrame:
    """``row, _flow_row, _fid, _model``: per flow id and model (null a key of its own), the
    entry of the first row."""
    return (entries.filter(pl.col("_fid").is_not_null()).sort(S.ROW, maintain_order=True)
            .unique(["_fid", "_model"], keep="first", maintain_order=True)
            .select(S.ROW, "_flow_row", "_fid", pl.col("_model").cast(_I64)))


def _flow_hits(todo: pl.DataFrame, src: pl.DataFrame) -> pl.DataFrame:
    """``row, _flow_row, _via`` of the ``todo`` rows (``row, _fid, _model, _i``: one per
    flow id, ``_i`` their order) that a source in ``src`` (``_first_source`` entries with
    ``_gen``, the hop that added them) reaches, ``_via`` the source's model: a row without
    a model takes the earliest source of its first flow id that has one; a row of model M
    the source of model M, else of no model, of its first flow id that has one
    (same-model sources first)."""
    found = todo.join(src.select("_fid", "_flow_row", "_gen", _src=S.ROW, _via="_model"),
                      on="_fid")
    # a row without a model takes any source; one of model M its own model's (0), else
    # one of no model (1), never another model's (null: dropped)
    same = pl.col("_model").is_null() | (pl.col("_via") == pl.col("_model"))
    pref = pl.when(same).then(0).when(pl.col("_via").is_null()).then(1)
    return (found.with_columns(_pref=pref).drop_nulls("_pref")
            .sort("_pref", "_i", "_gen", "_src").group_by(S.ROW, maintain_order=True)
            .agg(pl.col("_flow_row", "_via").first()))
