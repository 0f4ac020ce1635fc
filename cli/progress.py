"""A progress line on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
import time


class Bar:
    def __init__(self, label: str, enabled: bool | None = None, unit: str = "MB",
                 scale: float = 1e6) -> None:
        """``unit``/``scale``: how ``done`` and ``total`` are shown (bytes as MB by
        default; ``unit="rows", scale=1`` for a count)."""
        self.label = label
        self.unit = unit
        self.scale = scale
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and (total is None or done < total):
            return
        self.last = now
        if total:
            frac = min(done / total, 1.0)
            filled = int(frac * 30)
            bar = "#" * filled + "-" * (30 - filled)
            amount = f"{done / self.scale:,.0f}/{total / self.scale:,.0f} {self.unit}"
            msg = f"\r{self.label} [{bar}] {frac:4.0%} {amount}"
        else:
            msg = f"\r{self.label} {done / self.scale:,.0f} {self.unit}"
        sys.stderr.write(msg)
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
