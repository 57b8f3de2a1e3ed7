"""Imports flow one way: a module may import its own package and the layers below it, never a
layer above or a sibling of its own layer. Read from the source (AST), so a function-level
import counts as much as a top-level one. The layers are drawn in docs/architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "assay"

# Lower numbers may be imported by higher ones, never the reverse.
LAYERS: dict[str, int] = {
    "errors": 0,
    "version": 0,
    "records": 1,
    "stats": 1,
    "suites": 2,
    "models": 3,
    "sandbox": 3,
    "grading": 4,
    "agents": 4,
    "report": 5,
    "runner": 6,
    "api": 7,
    "__init__": 7,
    "cli": 8,
    "__main__": 9,
}

# assay/__init__.py re-exports the api package (lazily): the two are one layer and one unit.
ONE_UNIT = {"__init__", "api"}

# Imports that still run against the flow, each to be removed by the change that fixes it.
# The test fails when one listed here is gone, so the list can only shrink.
KNOWN_BACKWARDS: set[tuple[str, str]] = set()


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "assay":
                names = [f"assay.{a.name}" for a in node.names]
            found += [(n, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return [(n, line) for n, line in found if n == "assay" or n.startswith("assay.")]


def _violations() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        here = _package_of(path)
        assert here in LAYERS, f"{path}: package {here!r} has no layer in this test"
        for name, line in _imports(path):
            parts = name.split(".")
            there = parts[1] if len(parts) > 1 else "__init__"
            if there == here or {here, there} == ONE_UNIT:
                continue
            assert there in LAYERS, f"{path}:{line}: imports {name}, which has no layer"
            if LAYERS[there] >= LAYERS[here]:
                out.append((here, there, f"{path.relative_to(SRC)}:{line}: {name}"))
    return out


def test_imports_flow_one_way() -> None:
    bad = [v for v in _violations() if (v[0], v[1]) not in KNOWN_BACKWARDS]
    assert not bad, "imports against the flow:\n" + "\n".join(v[2] for v in bad)


def test_known_backwards_list_only_shrinks() -> None:
    still = {(v[0], v[1]) for v in _violations()}
    fixed = KNOWN_BACKWARDS - still
    assert not fixed, f"fixed, remove from KNOWN_BACKWARDS: {sorted(fixed)}"


def test_the_checker_sees_a_backward_import(tmp_path: Path) -> None:
    """The scan itself must be able to fail: a function-level import of a higher layer is
    found."""
    f = tmp_path / "probe.py"
    f.write_text("def f():\n    from assay.report.narrow import x\n    import assay.cli\n")
    names = [n for n, _ in _imports(f)]
    assert names == ["assay.report.narrow", "assay.cli"]
