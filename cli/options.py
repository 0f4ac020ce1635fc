"""Options shared by every command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> int:
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = max(ctx.obj.get("verbose", 0), value)
    return value


def verbose_option(f: F) -> F:
    """``-v`` after the command name too (``neurontrace convert a b -v``)."""
    return click.option(
        "-v", "--verbose", count=True, expose_value=False, callback=_set_verbose,
        help="Show warnings (and tracebacks of bugs).",
    )(f)
