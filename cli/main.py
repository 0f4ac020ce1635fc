"""Entry point and the one error boundary: library errors become one line and an exit code.

Exit codes: 0 success, 2 bad input (the user's file or arguments), 1 a bug in neurontrace
(shown with a traceback only under ``-v``). Commands are imported when invoked, so that
``neurontrace capture`` does not pay for the analysis stack and ``--help`` is instant.

Every failure is exactly one line on stderr: ``neurontrace: error: <what>`` (bad input,
usage errors included) or ``neurontrace: internal error (...)`` (a bug). Messages are
folded onto one line (:func:`neurontrace.errors.one_line`) and file names given on the
command line that hold a newline or another control character are shown escaped. What
native code writes to the stderr file descriptor itself (a Rust panic report from
Polars, a child process) is held while a command runs (:class:`HeldStderr`): it follows
the command's output on success and is dropped on failure (shown under ``-v``).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NoReturn

from neurontrace.workers.settings import arrow_without_pandas, before_imports

before_imports()  # before anything imports Polars or NumPy

import click  # noqa: E402

from neurontrace import __version__  # noqa: E402
from neurontrace.cli.options import verbose_option  # noqa: E402
from neurontrace.errors import (  # noqa: E402
    NeurontraceError,
    is_panic,
    one_line,
    panic_message,
    shown,
)

#: command name -> module under neurontrace.cli defining a click command of that name.
COMMANDS: dict[str, str] = {
    "capture": "capture",
    "convert": "convert",
    "ops": "ops",
    "kernels": "kernels",
    "launches": "launches",
    "gaps": "gaps",
    "copies": "copies",
    "steps": "steps",
    "ranks": "ranks",
    "report": "report",
    "compare": "compare",
    "export": "export",
    "advise": "advise",
}

#: Commands whose stderr stays live: ``capture`` runs the user's program, whose output
#: the user watches as it runs.
LIVE_STDERR = frozenset({"capture"})

#: ``ctx.meta`` key holding the arguments as given (to show file names in them escaped).
ARGV = "neurontrace.argv"

#: ``ctx.meta`` key holding how many scans of our files preceded the command.
SCANS = "neurontrace.scans"

#: Modules whose exceptions mean reading data failed (a corrupt file can be the cause).
_READING_MODULES = ("polars", "pyarrow", "pyo3_runtime")

#: click's message for a file or folder argument that fails its checks.
_CLICK_PATH = re.compile(r"^(?:File|Directory|Path) ('.*'|\".*\") (.+?)\.?$", re.DOTALL)


def say(line: str) -> None:
    """Print one line on stderr."""
    click.echo(line, err=True)


def escape_args(message: str, argv: Sequence[str]) -> str:
    """``message`` with each argument that holds an unprintable character (a newline in
    a file name) replaced by its escaped form (:func:`neurontrace.errors.shown`)."""
    odd = [a for a in argv if a and not a.isprintable()]
    for arg in sorted({*odd, *(str(Path(a)) for a in odd)}, key=len, reverse=True):
        message = message.replace(arg, shown(arg))
    return message


def from_reading(e: BaseException) -> bool:
    """True when ``e`` may come from reading a file: a Polars or Arrow error, a Rust
    panic, an operating-system error."""
    return isinstance(e, OSError) or any(
        c.__module__.split(".", 1)[0] in _READING_MODULES for c in type(e).__mro__
    )


def scans() -> int:
    """How many lazy scans of our files this process has made (none if it has not
    imported the store)."""
    store = sys.modules.get("neurontrace.io.store")
    return int(store.scans()) if store is not None else 0


def unreadable_input(e: BaseException, since: int) -> str | None:
    """For an unexpected ``e`` raised after files of ours were scanned lazily by scans
    after the first ``since`` (the read happens inside an analysis, at collect time): a
    message naming the first of those files that cannot be read whole, or None (then
    ``e`` is a bug)."""
    if not from_reading(e) or "neurontrace.io.store" not in sys.modules:
        return None  # nothing was scanned in this process
    from neurontrace.io import store

    return store.unreadable(store.scanned(since))


class HeldStderr:
    """The stderr file descriptor (2) pointed at an anonymous temporary file while a
    command runs, and Python's ``sys.stderr`` at the real stderr.

    Native code (a Rust panic report from Polars, which no Python handler can silence;
    Arrow's C++ log) and child processes write to descriptor 2 directly: held, their
    text is copied to stderr when the command ends if it succeeded (or ``keep``), and
    dropped if it failed, so that a failure is the boundary's one line. Inactive where
    descriptor 2 is not open.
    """

    def __init__(self, active: bool = True) -> None:
        self.active = active
        self.real: int | None = None
        self.held: IO[bytes] | None = None
        self.saved: Any = None
        #: Copy the held text to stderr even when the command fails (``-v``).
        self.keep_on_failure = False

    def __enter__(self) -> HeldStderr:
        if not self.active:
            return self
        try:
            sys.stderr.flush()
            held = tempfile.TemporaryFile(prefix="neurontrace-stderr-")  # noqa: SIM115
        except (OSError, ValueError):  # no temporary folder to write in: stay live
            return self
        try:
            real = os.dup(2)
        except OSError:  # descriptor 2 closed
            held.close()
            return self
        self.real, self.held = real, held
        os.dup2(held.fileno(), 2)
        if _fileno(sys.stderr) == 2:  # our own messages keep going to the real stderr
            self.saved = sys.stderr
            sys.stderr = open(real, "w", encoding=sys.stderr.encoding,  # noqa: SIM115
                              errors=sys.stderr.errors, buffering=1, closefd=False)
        return self

    def release(self, keep: bool) -> None:
        """Point descriptor 2 back at stderr; copy what was held there if ``keep``."""
        if self.real is None or self.held is None:
            return
        if self.saved is not None:
            sys.stderr.flush()
            sys.stderr.close()  # closefd=False: the descriptor stays open
            sys.stderr, self.saved = self.saved, None
        os.dup2(self.real, 2)
        os.close(self.real)
        self.real = None
        held, self.held = self.held, None
        with held:
            if keep and held.seek(0, os.SEEK_END):
                sys.stderr.flush()
                held.seek(0)
                while chunk := held.read(1 << 16):
                    os.write(2, chunk)

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        ok = e is None or (isinstance(e, click.exceptions.Exit) and e.exit_code == 0)
        self.release(keep=ok or self.keep_on_failure)


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def _verbose(ctx: click.Context) -> int:
    return int((ctx.obj or {}).get("verbose", 0)) if isinstance(ctx.obj, dict) else 0


def _command_name(ctx: click.Context) -> str | None:
    """The subcommand about to run (click keeps it in a private field; None if absent)."""
    names = getattr(ctx, "_protected_args", None) or ctx.args
    return names[0] if names else None


class Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in ("capture", "convert"):  # these read traces with pyarrow
            arrow_without_pandas()  # (convert does it itself, once its workers start)
        module = importlib.import_module(f"neurontrace.cli.{COMMANDS[name]}")
        cmd = getattr(module, name.replace("-", "_"))
        assert isinstance(cmd, click.Command)
        return cmd

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGV] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        hold = HeldStderr(active=_command_name(ctx) not in LIVE_STDERR)
        ctx.meta[SCANS] = scans()
        try:
            with hold:
                try:
                    return super().invoke(ctx)
                finally:
                    hold.keep_on_failure = _verbose(ctx) > 0
        except NeurontraceError as e:
            self.fail(ctx, e.exit_code, str(e))
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            say("neurontrace: interrupted")
            ctx.exit(130)
        except BrokenPipeError:
            ctx.exit(0)
        except Exception as e:  # a bug, or a corrupt file found only when collected
            self.unexpected(ctx, e)
        except BaseException as e:  # a Rust panic is not an Exception; nothing else here
            if not is_panic(e):
                raise
            self.unexpected(ctx, e)

    def fail(self, ctx: click.Context, code: int, message: str) -> NoReturn:
        """Exit with ``code`` after ``neurontrace: error: <message>`` on one line."""
        say(f"neurontrace: error: {one_line(escape_args(message, ctx.meta.get(ARGV, ())))}")
        ctx.exit(code)

    def unexpected(self, ctx: click.Context, e: BaseException) -> NoReturn:
        """An error no code of ours raised on purpose: bad input (exit 2) when a file of
        ours that was read is corrupt, else a bug (exit 1), in one line (the traceback
        under ``-v``)."""
        bad = unreadable_input(e, ctx.meta.get(SCANS, 0))
        if bad is not None:
            self.fail(ctx, 2, bad)
        if _verbose(ctx):
            traceback.print_exception(e)
        text = f"{type(e).__name__}: {panic_message(e) if is_panic(e) else e}"
        what = one_line(escape_args(text, ctx.meta.get(ARGV, ())), 2)
        say(f"neurontrace: internal error ({what}); this is a bug, rerun with -v for the "
            "traceback")
        ctx.exit(1)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        """click's ``main``, with its usage errors as one line each (``--help`` and a
        bare ``neurontrace`` still print the usage text)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # bare ``neurontrace``: as --help
            click.echo(e.format_message())
            code = 0
        except click.ClickException as e:
            say(usage_line(e))
            code = e.exit_code
        except click.exceptions.Abort:
            say("neurontrace: aborted")
            code = 1
        sys.exit(code if isinstance(code, int) else 0)


def usage_line(e: click.ClickException) -> str:
    """A click error as one line: ``neurontrace: error: <file>: <what>`` for a file
    argument that fails click's checks, else ``neurontrace: error: <message> (see
    neurontrace CMD --help)``."""
    message = e.format_message()
    m = _CLICK_PATH.match(message.split(": ", 1)[-1])
    if isinstance(e, click.BadParameter) and m:
        try:
            name = str(ast.literal_eval(m.group(1)))
        except (ValueError, SyntaxError):
            name = m.group(1)
        return f"neurontrace: error: {shown(name)}: {m.group(2)}"
    ctx = getattr(e, "ctx", None)
    hint = f" (see {ctx.command_path} --help)" if isinstance(e, click.UsageError) and ctx \
        else ""
    return f"neurontrace: error: {one_line(message)}{hint}"


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@verbose_option
@click.version_option(__version__, prog_name="neurontrace")
def cli() -> None:
    """Profiler traces of PyTorch runs (Trainium, CUDA, CPU) as one Parquet event table."""


def main() -> None:
    cli(prog_name="neurontrace")


if __name__ == "__main__":
    main()
