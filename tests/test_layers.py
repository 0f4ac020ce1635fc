"""Imports go one way (DEVELOPERS.md, "Layout"): a reader only turns bytes into batches
of rows, so no module under ``neurontrace/readers/`` imports the pipeline
(``neurontrace.table``) or our processes (``neurontrace.workers``). Checked on the source
with ``ast``: every ``import`` and ``from ... import``, at any depth (inside functions,
under ``TYPE_CHECKING``), relative ones resolved."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READERS = ROOT / "neurontrace" / "readers"
#: Packages a reader must not import.
PIPELINE = ("neurontrace.table", "neurontrace.workers")


def imported(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` (under ``root``) imports (``from neurontrace import table``
    counts as ``neurontrace.table``)."""
    package = ".".join(path.relative_to(root).parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def forbidden(names: set[str]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in PIPELINE)}


def test_no_reader_imports_the_pipeline_or_the_workers() -> None:
    modules = sorted(READERS.rglob("*.py"))
    assert len(modules) > 10  # the readers are where this test looks
    wrong = {str(m.relative_to(ROOT)): sorted(forbidden(imported(m))) for m in modules}
    assert {m: names for m, names in wrong.items() if names} == {}


def test_io_imports_no_reader_derivation_worker_or_convert() -> None:
    """``io`` is our files (store, atomic writes, scratch folders): below the pipeline."""
    below = ("neurontrace.readers", "neurontrace.table", "neurontrace.workers",
             "neurontrace.convert", "neurontrace.loading")
    modules = sorted((ROOT / "neurontrace" / "io").rglob("*.py"))
    assert len(modules) > 5
    wrong = {str(m.relative_to(ROOT)): sorted(n for n in imported(m)
                                              if any(n == p or n.startswith(p + ".")
                                                     for p in below))
             for m in modules}
    assert {m: names for m, names in wrong.items() if names} == {}


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    """The check itself: each way of spelling an import of the pipeline is found."""
    pkg = tmp_path / "neurontrace" / "readers" / "kineto"
    pkg.mkdir(parents=True)
    forms = {
        "import neurontrace.table.spill": "neurontrace.table.spill",
        "from neurontrace.table.spill import Budget": "neurontrace.table.spill",
        "from neurontrace import workers": "neurontrace.workers",
        "from ...table import chunks": "neurontrace.table",
        "def f():\n    from neurontrace.workers.executors import Processes":
            "neurontrace.workers.executors",
        "if TYPE_CHECKING:\n    from neurontrace.table.spill import SpilledFrames":
            "neurontrace.table.spill",
    }
    for source, name in forms.items():
        module = pkg / "m.py"
        module.write_text(source + "\n")
        assert name in forbidden(imported(module, tmp_path)), source
    module.write_text("from neurontrace.readers.base import Events\nimport polars\n")
    assert forbidden(imported(module, tmp_path)) == set()
