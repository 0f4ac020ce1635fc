"""A progress bar on stderr (click's), drawn only when stderr is a terminal unless asked.

:class:`Bar` is the ``progress(done, total)`` callback the converter, the readers and the
export call; click's :func:`click.progressbar` draws it, started at the first call (a
command that reads nothing raw draws nothing).
"""

from __future__ import annotations

import sys
from typing import IO, Any

import click


class _Terminal:
    """``stream``, said to be a terminal: how ``--progress`` draws the bar elsewhere too
    (click draws only on a terminal; on anything else it prints the label once)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Bar:
    def __init__(self, label: str, enabled: bool | None = None, unit: str = "MB",
                 scale: float = 1e6, file: IO[str] | None = None) -> None:
        """``enabled``: draw (True), never (False), or when ``file`` is a terminal (None).
        ``unit``/``scale``: how ``done`` and ``total`` are shown (bytes as MB by default;
        ``unit="rows", scale=1`` for a count). ``file``: stderr by default."""
        self.label = label
        self.unit = unit
        self.scale = scale
        self.file = file if file is not None else sys.stderr
        self.enabled = self.file.isatty() if enabled is None else enabled
        self.bar: Any = None  # click's ProgressBar, from the first call

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = click.progressbar(
                length=total or None, iterable=None if total else _unsized(),
                label=self.label, file=self.file if self.file.isatty()
                else _Terminal(self.file),  # type: ignore[arg-type]
                item_show_func=lambda amount: amount, show_eta=False, width=30,
            )
            self.bar.__enter__()
        if total and self.bar.length != total:
            self.bar.length = total
        amount = (f"{done / self.scale:,.0f}/{total / self.scale:,.0f} {self.unit}" if total
                  else f"{done / self.scale:,.0f} {self.unit}")
        self.bar.update(max(done - self.bar.pos, 0), current_item=amount)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _unsized() -> Any:
    """An iterable of unknown length: click's bar without a total (no percentage)."""
    yield from ()
