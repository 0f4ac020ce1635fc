"""Warnings a reader records while repairing a foreign trace.

Nothing is dropped silently: every repair is counted under a short code, and the first
few occurrences of each code keep a readable message (which event, what was wrong, what
was done). ``convert`` stores the counts in the output's metadata and the command line
shows them with ``-v``.

Notes are not repairs: facts about the input a reader of the figures must know (several
traces merged as the ranks of one run), shown every time, never counted as warnings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

EXAMPLES_PER_CODE = 5


@dataclass
class Diagnostics:
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def warn(self, code: str, message: str, n: int = 1) -> None:
        self.counts[code] += n
        ex = self.examples.setdefault(code, [])
        if len(ex) < EXAMPLES_PER_CODE:
            ex.append(message)

    def note(self, message: str) -> None:
        """Record a fact about the input that is not a repair (see the module docstring)."""
        self.notes.append(message)

    def merge(self, other: Diagnostics) -> None:
        self.counts.update(other.counts)
        self.notes.extend(other.notes)
        for code, msgs in other.examples.items():
            ex = self.examples.setdefault(code, [])
            ex.extend(msgs[: max(0, EXAMPLES_PER_CODE - len(ex))])

    def __bool__(self) -> bool:
        return bool(self.counts)

    def lines(self) -> list[str]:
        out = []
        for code, n in sorted(self.counts.items()):
            out.append(f"{code}: {n}")
            out.extend(f"  {m}" for m in self.examples.get(code, []))
        return out
