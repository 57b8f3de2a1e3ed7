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
    "environments": 4,
    "grading": 5,
    "agents": 5,
    "report": 6,
    "runner": 7,
    "api": 8,
    "__init__": 8,
    "cli": 9,
    "__main__": 10,
}

# assay/__init__.py re-exports the api package (lazily): the two are one layer and one unit.
ONE_UNIT = {"__init__", "api"}

# Imports that still run against the flow, each to be removed by the change that fixes it.
# The test fails when one listed here is gone, so the list can only shrink.
KNOWN_BACKWARDS: set[tuple[str, str]] = set()

# The CLI parses, calls the API and prints: it imports nothing below ``assay.api`` but the
# error tree and the version, so whatever ``exp run`` does, a Python caller can do the same way.
CLI_MAY_IMPORT = ("assay.api", "assay.errors", "assay.version", "assay.cli")
# "module.py: assay.imported.name" pairs still reaching below the API from cli/; only shrinks.
CLI_EXCEPTIONS: set[str] = set()


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


def _cli_reaches_below_api(cli: Path = SRC / "cli") -> list[str]:
    out = []
    for path in sorted(cli.rglob("*.py")):
        for name, line in _imports(path):
            if name == "assay":
                name = "assay.__init__"
            if not any(name == ok or name.startswith(ok + ".") for ok in CLI_MAY_IMPORT):
                out.append((f"{path.relative_to(cli)}: {name}", line))
    return [f"{key} (line {line})" for key, line in out if key not in CLI_EXCEPTIONS]


def test_cli_imports_only_the_api() -> None:
    bad = _cli_reaches_below_api()
    assert not bad, "cli/ imports below assay.api:\n" + "\n".join(bad)


def test_cli_exceptions_list_only_shrinks() -> None:
    still = set()
    for path in sorted((SRC / "cli").rglob("*.py")):
        still |= {f"{path.relative_to(SRC / 'cli')}: {name}" for name, _ in _imports(path)}
    fixed = CLI_EXCEPTIONS - still
    assert not fixed, f"fixed, remove from CLI_EXCEPTIONS: {sorted(fixed)}"


def test_the_cli_rule_sees_an_import_below_the_api(tmp_path: Path) -> None:
    """The CLI rule must be able to fail: a function-level import of the runner from a CLI
    module is named, and the allowed ones are not."""
    (tmp_path / "probe.py").write_text("from assay.api.tasks import run_trial\n"
                                       "from assay import errors, version\n"
                                       "def f():\n    from assay.runner.state import StateDB\n"
                                       "    import assay.records.io\n")
    found = _cli_reaches_below_api(tmp_path)
    assert found == ["probe.py: assay.runner.state (line 4)",
                     "probe.py: assay.records.io (line 5)"]


def test_the_checker_sees_a_backward_import(tmp_path: Path) -> None:
    """The scan itself must be able to fail: a function-level import of a higher layer is
    found."""
    f = tmp_path / "probe.py"
    f.write_text("def f():\n    from assay.report.narrow import x\n    import assay.cli\n")
    names = [n for n, _ in _imports(f)]
    assert names == ["assay.report.narrow", "assay.cli"]


# Rooms: the packages inside a layer's package. A room may import the package's flat modules
# and the rooms below its own level, never a room at its level or above; the flat modules (a
# registry, a scheduler) may import any room. Every room is listed here, so a new package
# inside a layer is a decision, not an accident.
ROOMS: dict[str, dict[str, int]] = {
    "grading": {"rubric": 0, "judge": 1, "answers": 2, "verify": 2},
    "models": {"gateway": 0},
    "runner": {"executors": 0},
    "suites": {"harbor": 0},
    "agents": {"claude": 0, "codex": 0, "qwen": 0, "mcode": 0, "mini_swe_agent": 0},
    "report": {"render": 0},
    "environments": {},
}


def _room_of(path: Path) -> tuple[str, str | None]:
    parts = path.relative_to(SRC).parts
    if len(parts) > 2:
        return parts[0], parts[1]
    return parts[0], None


def _room_violations() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        pkg, here = _room_of(path)
        parts = path.relative_to(SRC).parts
        if len(parts) > 2:
            assert here in ROOMS.get(pkg, {}), f"{path}: room {pkg}/{here} has no level here"
        if here is None:
            continue
        for name, line in _imports(path):
            q = name.split(".")
            if len(q) < 3 or q[1] != pkg or q[2] == here or q[2] not in ROOMS[pkg]:
                continue
            if ROOMS[pkg][q[2]] >= ROOMS[pkg][here]:
                out.append(f"{path.relative_to(SRC)}:{line}: room {here} imports {name}")
    return out


def test_rooms_import_only_lower_rooms() -> None:
    bad = _room_violations()
    assert not bad, "imports between rooms against their order:\n" + "\n".join(bad)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the assay modules it imports (``from pkg import submodule`` names the
    submodule; a name defined in a package's ``__init__`` names the package)."""
    modules: dict[str, Path] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    target = sub if sub in modules else node.module
                    if target in modules and target != mod:
                        graph[mod].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != mod:
                        graph[mod].add(alias.name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles() -> None:
    """Function-level imports count: a cycle hidden in a function is still a cycle."""
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
