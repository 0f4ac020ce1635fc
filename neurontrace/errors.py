"""One exception hierarchy; the command line turns it into exit codes in one place."""

from __future__ import annotations


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
