"""One exception hierarchy; the command line turns it into exit codes in one place."""

from __future__ import annotations

import re


class NeurontraceError(Exception):
    """Base of every error neurontrace raises on purpose."""

    exit_code = 1


class BadInput(NeurontraceError):
    """The user's input is wrong: unreadable, truncated, not a trace, wrong schema.

    The message is one line naming the file and the byte offset, event or field.
    """

    exit_code = 2


class UnknownFormat(BadInput):
    """No reader recognises the input."""


class SchemaMismatch(BadInput):
    """A Parquet file of ours written with another schema version."""


class ToolMissing(BadInput):
    """An external converter we need (e.g. neuron-explorer) is not on PATH."""


class WorkloadFailed(NeurontraceError):
    """The profiled program failed: it raised, exited non-zero, or its variants disagree.

    Not a bug in neurontrace and not a malformed input: exit code 3.
    """

    exit_code = 3


def shown(path: object) -> str:
    """``path`` as text for a one-line message: as is when every character is printable,
    else Python's ``repr`` of it (quoted, ``\\n``, ``\\x1b``, ``\\udcff`` escaped), so that
    a file name holding a newline or a terminal escape stays on one line and is exact."""
    text = str(path)
    return text if text.isprintable() else repr(text)


#: Lines of a multi-line message kept by :func:`one_line` (the rest are counted).
ONE_LINE_PARTS = 4


def one_line(text: str, parts: int = ONE_LINE_PARTS) -> str:
    """``text`` as one line: its non-blank lines stripped and joined with ``" / "`` (the
    first ``parts`` of them, then ``"(+N lines)"``), and every other character that is
    not printable (tab, escape, a lone surrogate) escaped as in ``repr``."""
    lines = [s.strip() for s in text.splitlines()]
    lines = [s for s in lines if s]
    more = len(lines) - parts
    line = " / ".join(lines[:parts]) + (f" (+{more} lines)" if more > 0 else "")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def is_panic(e: BaseException) -> bool:
    """True for a Rust panic surfaced by PyO3 (Polars): ``pyo3_runtime.PanicException``,
    which derives from ``BaseException``, not ``Exception``. Known by its module and name
    (each PyO3 extension makes its own such class)."""
    return any(c.__module__ == "pyo3_runtime" and c.__name__ == "PanicException"
               for c in type(e).__mro__)


_JOINED = re.compile(r'called `Result::unwrap\(\)` on an `Err` value: JoinError::Panic\(Id\(\d+\), '
                     r'"(.*)", \.\.\.\)', re.DOTALL)


def panic_message(e: BaseException) -> str:
    """What a panic says, out of the ``JoinError::Panic(Id(n), "...")`` wrappers Polars'
    threads put around it (each escaping the quotes of the one inside)."""
    text = str(e)
    while m := _JOINED.fullmatch(text):
        text = m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    return text
