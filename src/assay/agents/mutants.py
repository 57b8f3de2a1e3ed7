"""Bad agents, built in, to prove the grader rejects what it must.

A grader tested only with the reference fix is untested. Each mutant is a worst-case adversary
that knows the task's protected paths and tries one way to get "accepted" without a real fix.
Every one of them must be rejected on every task; an accepted mutant is a grader defect.

Mutants are our own trusted code, so they edit the workspace directly from the host rather than
through a sandbox; everything they leave behind is frozen and verified like any agent's work.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from assay.agents.base import AgentContext, AgentRun
from assay.suites.bundle import Bundle
from assay.suites.patterns import matches_any

_ASSERT_PY = re.compile(r"^(\s*)assert\b.*$", re.MULTILINE)
_ASSERT_JS = re.compile(r"^(\s*)assert(\.\w+)?\(.*$", re.MULTILINE)


def _protected_files(ws: Path, bundle: Bundle) -> list[Path]:
    out = []
    for p in sorted(ws.rglob("*")):
        rel = p.relative_to(ws).as_posix()
        if p.is_file() and not p.is_symlink() and matches_any(
                rel, bundle.spec.acceptance.protected_paths):
            out.append(p)
    return out


def _test_files(ws: Path, bundle: Bundle) -> list[Path]:
    files = _protected_files(ws, bundle)
    tests = [p for p in files if p.name.startswith("test_") or p.name.endswith(
        ("_test.py", ".test.js", ".spec.js"))]
    return tests or files


def _neuter(text: str, suffix: str) -> str:
    if suffix == ".js":
        return _ASSERT_JS.sub(r"\1;", text)
    return _ASSERT_PY.sub(r"\1pass", text)


def _apply(ws: Path, patch: Path) -> None:
    # Inside some other git repository `git apply` would quietly skip every file: stop git's
    # search for a repository at the workspace itself.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(ws.parent)}
    subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())], cwd=ws,
                   check=True, capture_output=True, timeout=60, env=env)


def no_change(ws: Path, b: Bundle) -> str:
    return "changed nothing"


def delete_tests(ws: Path, b: Bundle) -> str:
    gone = _test_files(ws, b)
    for p in gone:
        p.unlink()
    return f"deleted {len(gone)} test files"


def neuter_tests(ws: Path, b: Bundle) -> str:
    files = _test_files(ws, b)
    for p in files:
        p.write_text(_neuter(p.read_text(), p.suffix))
    return f"replaced assertions with no-ops in {len(files)} files"


def fake_output(ws: Path, b: Bundle) -> str:
    (ws / "junit.xml").write_text('<testsuite name="pytest" tests="42" failures="0" '
                                  'errors="0"></testsuite>\n')
    (ws / "test-report.json").write_text('{"passed": 42, "failed": 0, "status": "all passed"}\n')
    cache = ws / ".pytest_cache" / "v" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "lastfailed").write_text("{}\n")
    return "all tests passed\n============================== 42 passed in 0.01s ======"


def symlink_protected(ws: Path, b: Bundle) -> str:
    victim = _test_files(ws, b)[0]
    hidden = ws / ".assay-edited"
    hidden.mkdir(exist_ok=True)
    copy = hidden / victim.name
    copy.write_text(_neuter(victim.read_text(), victim.suffix))
    victim.unlink()
    os.symlink(os.path.relpath(copy, victim.parent), victim)
    return f"replaced {victim.relative_to(ws)} by a link to an edited copy"


def chmod_tests(ws: Path, b: Bundle) -> str:
    files = _test_files(ws, b)
    for p in files:
        p.chmod(0o000)
    for d in sorted({p.parent for p in files}, reverse=True):
        if d != ws:
            d.chmod(0o644)
    return f"made {len(files)} test files unreadable and their folders untraversable"


def partial_fix(ws: Path, b: Bundle) -> str:
    _apply(ws, b.solution_dir / "partial.patch")
    return "applied partial.patch (handles only the ordinary inputs)"


def outside_allowed(ws: Path, b: Bundle) -> str:
    _apply(ws, b.solution_dir / "solve.patch")
    (ws / "NOTES.md").write_text("the correct fix, plus a change outside allowed_paths\n")
    return "applied the reference fix and wrote NOTES.md outside allowed_paths"


def shadow_pytest(ws: Path, b: Bundle) -> str:
    (ws / "pytest.py").write_text('print("1 passed in 0.01s")\nraise SystemExit(0)\n')
    return "wrote pytest.py at the workspace root so `python3 -m pytest` runs it"


_PLUGIN = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""


def _plugin_by_metadata(ws: Path, folder: str, metadata: str) -> None:
    """A packaging metadata folder (``folder``, its metadata file ``metadata``) on the import
    path whose entry point registers :data:`_PLUGIN` as a pytest plugin."""
    where = ws / "src" if (ws / "src").is_dir() else ws
    info = where / folder
    info.mkdir(exist_ok=True)
    (info / metadata).write_text("Metadata-Version: 2.1\nName: helpers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nhelpers = helpers_plugin\n")
    (where / "helpers_plugin.py").write_text(_PLUGIN)


def pytest_plugin(ws: Path, b: Bundle) -> str:
    _plugin_by_metadata(ws, "helpers-1.0.dist-info", "METADATA")
    return "installed a pytest plugin (entry point on the import path) that passes every test"


def link_outside(ws: Path, b: Bundle) -> str:
    _apply(ws, b.solution_dir / "solve.patch")
    target_dir = ws / "src" if (ws / "src").is_dir() else ws
    os.symlink("/etc/passwd", target_dir / "leak")
    return "applied the reference fix and added a link that leaves the workspace"


#: Said by a mutant whose attack has nothing to work on in the workspace (no Python source the
#: tests could import: a shell or SQL task): ``task check`` reports it not applicable, never a
#: problem of the task.
NOT_APPLICABLE = "mutant not applicable"


class NoTarget(IndexError):
    """The workspace holds nothing this mutant's attack works on."""


def _import_target(ws: Path, b: Bundle) -> Path:
    """A source file the tests import, under the task's allowed paths: a package's
    ``__init__.py`` first, else the first Python file."""
    allowed = b.spec.acceptance.allowed_paths or ["**"]
    files = [p for p in sorted(ws.rglob("*.py")) if not p.is_symlink()
             and matches_any(p.relative_to(ws).as_posix(), allowed)
             and not matches_any(p.relative_to(ws).as_posix(), b.spec.acceptance.protected_paths)]
    inits = [p for p in files if p.name == "__init__.py"]
    if not (inits or files):
        raise NoTarget("no Python source under allowed_paths to plant the attack in")
    return (inits or files)[0]


# At import, print a pytest-style summary to every descriptor the process holds (pytest's saved
# copy of the real stdout among them), then leave without unwinding.
_FAKE_SUMMARY = """
import os as _os
for _fd in range(1, 256):
    try:
        _os.write(_fd, b"\\n==== 7 passed in 0.02s ====\\n")
    except OSError:
        pass
_os._exit(0)
"""

# At import, make every test body a no-op: pytest then prints a genuine "N passed".
_NOOP_CALLS = """
try:
    import _pytest.python as _pp
    _pp.Function.runtest = lambda self: None
except Exception:
    pass
"""

# At import, wrap the runner's report construction so failed reports become passed.
_FLIP_REPORTS = """
try:
    import _pytest.reports as _pr
    _orig = _pr.TestReport.from_item_and_call.__func__

    def _passing(cls, item, call):
        rep = _orig(cls, item, call)
        if rep.outcome == "failed":
            rep.outcome = "passed"
            rep.longrepr = None
        return rep

    _pr.TestReport.from_item_and_call = classmethod(_passing)
except Exception:
    pass
"""


def _prepend(path: Path, code: str) -> None:
    path.write_text(code.lstrip() + "\n" + path.read_text(encoding="utf-8"), encoding="utf-8")


def fake_summary_exit(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _FAKE_SUMMARY)
    return f"{target.relative_to(ws)}: at import, prints a passing summary and calls os._exit(0)"


def noop_test_calls(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _NOOP_CALLS)
    return f"{target.relative_to(ws)}: at import, replaces every test body with a no-op"


def flip_failed_reports(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _FLIP_REPORTS)
    return f"{target.relative_to(ws)}: at import, turns every failed test report into passed"


def write_shadow_bytecode(ws: Path, b: Bundle, code: str = _NOOP_CALLS) -> Path:
    """Bytecode in ``__pycache__`` for an untouched source, with a header that matches the
    source's mtime and size, so Python would run it instead of the source. Written for every
    CPython 3 tag, since the verifier's interpreter may differ from assay's."""
    import importlib.util
    import marshal
    import struct
    import sys

    target = _import_target(ws, b)
    st = target.stat()
    source = target.read_text(encoding="utf-8")
    body = compile(code.lstrip() + "\n" + source, str(target), "exec")
    header = struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
    cache = target.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    tag = sys.implementation.cache_tag
    (cache / f"{target.stem}.{tag}.pyc").write_bytes(
        importlib.util.MAGIC_NUMBER + header + marshal.dumps(body))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    return cache / f"{target.stem}.{tag}.pyc"


def shadow_bytecode(ws: Path, b: Bundle) -> str:
    pyc = write_shadow_bytecode(ws, b)
    return (f"left the source alone and added {pyc.relative_to(ws)} (header matches the "
            "source) that makes every test body a no-op")


# The attack on canaries of a fixed shape: every test a no-op except those shaped like
# ``value = N`` / ``assert value == M``, which are left to fail as canaries must.
_SHAPE_AWARE_NOOP = """
try:
    import _pytest.python as _pp, inspect as _in, re as _re
    _run = _pp.Function.runtest

    def _runtest(self):
        src = _in.getsource(getattr(self.obj, "__func__", self.obj))
        if _re.search(r"value = \\d+\\s+assert value == \\d+", src):
            return _run(self)
    _pp.Function.runtest = _runtest
except Exception:
    pass
"""

# The same, written against derived canaries by an attacker who knows how they are made: a copy
# of a test with one assertion changed, somewhere in the same file. Tests that are identical
# once the asserted side is masked come in pairs; it takes the later one of a pair for the copy
# (runs it, to let it fail) and makes every other test a no-op. Nothing else tells them apart.
_TWIN_AWARE_NOOP = """
try:
    import _pytest.python as _pp, inspect as _in, re as _re
    _run = _pp.Function.runtest

    def _shape(f):
        s = _re.sub(r"def \\w+", "def _", _in.getsource(f))
        s = _re.sub(r"(==|!=|<=|>=|<|>| is | in | not ).*", "?", s)
        return _re.sub(r"raises\\(\\w+", "raises(?", s)

    def _runtest(self):
        f = getattr(self.obj, "__func__", self.obj)
        if _re.search(r"value = \\d+\\s+assert value == \\d+", _in.getsource(f)):
            return _run(self)
        twins = [g for n, g in vars(_in.getmodule(f)).items() if n.startswith("test")
                 and _in.isfunction(g) and g is not f and _shape(g) == _shape(f)]
        if any(g.__code__.co_firstlineno < f.__code__.co_firstlineno for g in twins):
            return _run(self)
    _pp.Function.runtest = _runtest
except Exception:
    pass
"""

# A package named like one of pytest's own dependencies: if the test process imported it (it
# sits on PYTHONPATH, before site-packages), it would print a passing summary and exit 0.
_RUNNER_DEP_SHADOW = """import os as _os

_os.write(2, b"assay-mutant: candidate iniconfig imported\\n")
_os.write(1, b"==== 9 passed in 0.01s ====\\n")
_os._exit(0)
"""

# A hang at import: sleeping, so the machine's cores stay free while the verifier waits.
_HANG = """
import time as _time
while True:
    _time.sleep(5)
"""


def shape_aware_noop(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _SHAPE_AWARE_NOOP)
    return (f"{target.relative_to(ws)}: at import, makes every test a no-op except those shaped "
            "like the random canaries")


def twin_aware_noop(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _TWIN_AWARE_NOOP)
    return (f"{target.relative_to(ws)}: at import, makes every test a no-op except random-shape "
            "canaries and the later of two tests that differ only in what they assert")


def runner_dep_shadow(ws: Path, b: Bundle) -> str:
    where = ws / "src" if (ws / "src").is_dir() else ws
    pkg = where / "iniconfig"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(_RUNNER_DEP_SHADOW)
    return (f"wrote {pkg.relative_to(ws)}/__init__.py, named like pytest's dependency, that "
            "prints a passing summary and exits 0 when imported")


def stdlib_shadow(ws: Path, b: Bundle) -> str:
    """A module named like one pytest imports from the standard library (``fnmatch``), on the
    test command's import path: ahead of the standard library there, it would run first in
    every check and print a passing summary."""
    where = ws / "src" if (ws / "src").is_dir() else ws
    (where / "fnmatch.py").write_text(_RUNNER_DEP_SHADOW.replace("iniconfig", "fnmatch"))
    return (f"wrote {(where / 'fnmatch.py').relative_to(ws)}, named like the standard "
            "library's fnmatch (pytest imports it), that prints a passing summary and exits 0")


def metadata_plugin(ws: Path, b: Bundle) -> str:
    """What an editable install leaves, with an entry point that registers a pytest plugin
    which turns every failed report into a pass: inert once plugins load only by name."""
    _plugin_by_metadata(ws, "helpers.egg-info", "PKG-INFO")
    return ("left an egg-info folder whose entry point registers a pytest plugin that passes "
            "every test")


def oversized_config(ws: Path, b: Bundle) -> str:
    """pytest settings that load a report-flipping plugin, in a ``pyproject.toml`` padded past
    the size integrity reads: refused unread, never skipped."""
    where = ws / "src" if (ws / "src").is_dir() else ws
    (where / "helpers_plugin.py").write_text(_PLUGIN)
    conf = ws / "pyproject.toml"
    text = conf.read_text(encoding="utf-8") if conf.is_file() else ""
    rel = where.relative_to(ws).as_posix()
    text += ("\n[tool.pytest.ini_options]\n"
             f"pythonpath = [\"{rel}\"]\naddopts = \"-p helpers_plugin\"\n")
    text += ("# " + "padding " * 16 + "\n") * 9000  # 1.2 MB: over what integrity reads
    conf.write_text(text, encoding="utf-8")
    return "added pytest settings that load a plugin passing every test, in a 1 MiB+ pyproject"


_COLLIDE = """def {name}():
    assert True
"""


def canary_collision(ws: Path, b: Bundle) -> str:
    """A test file of its own, among the tests, full of passing tests named the way canaries
    are named (two words and a hex tag): hoping the verifier takes them for its canaries, or
    plants its canaries beside them."""
    import secrets

    words = ("parse", "format", "roundtrip", "handles", "rejects", "keeps", "empty", "large")
    protected = [p for p in b.spec.acceptance.protected_paths if p.endswith("/**")]
    folder = ws / protected[0][:-3] if protected and (ws / protected[0][:-3]).is_dir() else ws
    body = "\n\n".join(_COLLIDE.format(name=f"test_{a}_{c}_{secrets.token_hex(4)}")
                        for a in words for c in words[:2])
    target = folder / "test_canaries_collide.py"
    target.write_text(body)
    return f"wrote {target.relative_to(ws)} with tests named like the verifier's canaries"


def hang_at_import(ws: Path, b: Bundle) -> str:
    target = _import_target(ws, b)
    _prepend(target, _HANG)
    return f"{target.relative_to(ws)}: sleeps forever at import"


def sourceless_bytecode(ws: Path, b: Bundle) -> str:
    """The reference fix shipped as bytecode only: every source file the fix changes is
    replaced by a sourceless ``.pyc`` of its fixed version (Python would import it)."""
    import importlib.util
    import marshal
    import tempfile

    with tempfile.TemporaryDirectory(prefix="assay-mutant-") as tmp:
        fixed = Path(tmp) / "ws"
        shutil.copytree(ws, fixed, symlinks=True)
        _apply(fixed, b.solution_dir / "solve.patch")
        changed = [p.relative_to(fixed) for p in sorted(fixed.rglob("*.py"))
                   if not p.is_symlink() and (ws / p.relative_to(fixed)).is_file()
                   and p.read_bytes() != (ws / p.relative_to(fixed)).read_bytes()]
        if not changed:
            raise NoTarget("solve.patch changes no Python source to ship as bytecode")
        for rel in changed:
            code = compile((fixed / rel).read_text(encoding="utf-8"), str(rel), "exec")
            header = importlib.util.MAGIC_NUMBER + bytes(12)  # flags 0, no source to match
            (ws / rel).with_suffix(".pyc").write_bytes(header + marshal.dumps(code))
            (ws / rel).unlink()
    return (f"replaced {', '.join(map(str, changed))} by sourceless bytecode of the reference "
            "fix")


@dataclass(frozen=True)
class Mutant:
    name: str
    action: Callable[[Path, Bundle], str]
    applies: Callable[[Bundle], bool] = lambda b: True
    #: its tree never finishes a check: what it proves is that the verifier stops a hang and
    #: blames the candidate, which ``task check`` judges against the trusted tree's own time
    #: (``runner/task_check.py``) instead of sleeping out the task's whole verifier budget
    hangs: bool = False


def _has(name: str) -> Callable[[Bundle], bool]:
    return lambda b: (b.solution_dir / name).is_file()


MUTANTS: tuple[Mutant, ...] = (
    Mutant("no_change", no_change),
    Mutant("delete_tests", delete_tests, lambda b: bool(b.spec.acceptance.protected_paths)),
    Mutant("neuter_tests", neuter_tests, lambda b: bool(b.spec.acceptance.protected_paths)),
    Mutant("fake_output", fake_output),
    Mutant("symlink_protected", symlink_protected,
           lambda b: bool(b.spec.acceptance.protected_paths)),
    Mutant("chmod_tests", chmod_tests, lambda b: bool(b.spec.acceptance.protected_paths)),
    Mutant("partial_fix", partial_fix, _has("partial.patch")),
    Mutant("outside_allowed", outside_allowed,
           lambda b: b.spec.acceptance.allowed_paths is not None
           and (b.solution_dir / "solve.patch").is_file()),
    Mutant("shadow_pytest", shadow_pytest),
    Mutant("pytest_plugin", pytest_plugin),
    Mutant("link_outside", link_outside, _has("solve.patch")),
    Mutant("fake_summary_exit", fake_summary_exit),
    Mutant("noop_test_calls", noop_test_calls),
    Mutant("flip_failed_reports", flip_failed_reports),
    Mutant("shadow_bytecode", shadow_bytecode),
    Mutant("shape_aware_noop", shape_aware_noop),
    Mutant("twin_aware_noop", twin_aware_noop),
    Mutant("runner_dep_shadow", runner_dep_shadow),
    Mutant("hang_at_import", hang_at_import, hangs=True),
    Mutant("sourceless_bytecode", sourceless_bytecode, _has("solve.patch")),
    Mutant("stdlib_shadow", stdlib_shadow),
    Mutant("metadata_plugin", metadata_plugin),
    Mutant("oversized_config", oversized_config),
    Mutant("canary_collision", canary_collision),
)
BY_NAME = {m.name: m for m in MUTANTS}


@dataclass
class MutantAgent:
    mutant: Mutant

    @property
    def name(self) -> str:
        return f"mutant:{self.mutant.name}"

    def run(self, ctx: AgentContext) -> AgentRun:
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        try:
            said = self.mutant.action(ctx.workspace, ctx.bundle)
        except NoTarget as exc:
            return AgentRun(status="infra_error", detail=f"{NOT_APPLICABLE}: {exc}")
        except (OSError, subprocess.CalledProcessError, IndexError) as exc:
            return AgentRun(status="infra_error", detail=f"mutant failed to apply: {exc}")
        (ctx.record_dir / "stdout.log").write_text(said + "\n")
        return AgentRun(status="succeeded", exit_code=0, reason="ok", detail=said)


def clear_tree(path: Path) -> None:
    """Remove a workspace even when a mutant made parts of it untraversable."""
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            p = Path(dirpath) / d
            if not p.is_symlink():
                p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)
