"""Capture: profile PyTorch code on Trainium, CUDA or CPU the way each wants to be profiled.

- ``neurontrace capture`` (:func:`neurontrace.capture.study.run`): the bundled RMSNorm
  study, or a ``FILE.py`` workload, one folder per variant;
- ``neurontrace capture -- CMD`` (:func:`neurontrace.capture.command.run`): a user's
  program that profiles itself with :func:`profile`, one folder per rank;
- :func:`profile`: the context manager a training loop uses.

Importing this package imports neither torch nor the analysis stack (pyarrow, polars):
torch is imported when a capture starts, the converter only once profiling is over.
"""

from __future__ import annotations

from neurontrace.capture.session import Session, profile

__all__ = ["Session", "profile"]
