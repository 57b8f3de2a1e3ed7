"""What an agent leaves in its workspace: the caches an honest run writes, and the trees an
attacker (or a runaway loop) leaves to fill the run's disk or stall the verifier.

Real parts throughout: the example task ``duration-parse-001``, ``command:`` agents running in
the real bubblewrap sandbox with Debian's python3 and pytest, the real freeze and verifier.

The default run uses reduced trees where the figure is set low in the test bundle (file count,
growing file). The full forms (200,000 empty files against the default 100,000 limit) run with
``ASSAY_FULL_WORKSPACE_LIMITS=1``; the 1 GiB sparse file always runs at full size (it is cheap).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay.agents import parse_agent
from assay.errors import AssayError
from assay.grading.verify.integrity import check_integrity
from assay.records.artifact import freeze
from assay.records.trial import Grade, Validity
from assay.records.workspace import (
    DEFAULT_IGNORED_PATHS,
    MAX_DEPTH,
    WorkspaceLimits,
    WorkspaceOverLimit,
    remove_tree,
    walk_workspace,
)
from assay.runner.trial import TrialResult, run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle
from assay.suites.patterns import glob_match

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent-tasks" / "duration-parse-001"
FULL = os.environ.get("ASSAY_FULL_WORKSPACE_LIMITS") == "1"


def _bundle(tmp: Path, *, resources: str | None = None, acceptance_extra: str = "",
            agent_seconds: int = 120) -> Path:
    """A copy of the example task, its task.yaml edited (the starting tree, hence the pinned
    digest, unchanged)."""
    dest = tmp / "duration-parse-001"
    shutil.copytree(EXAMPLE, dest)
    p = dest / "task.yaml"
    text = p.read_text()
    if resources is not None:
        text = text.replace("resources: {cpu_cores: 1, memory_limit_mib: 1024, pids: 128}",
                            f"resources: {{cpu_cores: 1, memory_limit_mib: 1024, pids: 128, "
                            f"{resources}}}")
    text = text.replace("agent_wall_seconds: 120", f"agent_wall_seconds: {agent_seconds}")
    if acceptance_extra:
        text = text.rstrip("\n") + "\n" + acceptance_extra + "\n"
    p.write_text(text)
    return dest


def _fix_script() -> str:
    """The reference fix applied the way an agent edits: ``git apply`` of a heredoc."""
    patch = (EXAMPLE / "solution" / "solve.patch").read_text()
    return f"git apply --whitespace=nowarn <<'ASSAYPATCH'\n{patch}ASSAYPATCH\n"


def _run(bundle: Path, script: str, out: Path) -> TrialResult:
    return run_trial(load_bundle(bundle), parse_agent(f"command:{script}"), out)


def _manifest(trial_dir: Path) -> dict[str, Any]:
    return json.loads((trial_dir / "artifact.json").read_text())


def _du(path: Path) -> int:
    """Bytes really allocated below ``path`` (what the run's disk holds)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


# ------------------------------------------------------- honest agents that run things

SESSIONS = {
    # what an agent does: run the tests (failing), fix, run them again (passing), run the code
    "pytest": "PYTHONPATH=src python3 -m pytest -q tests; {fix}"
              "PYTHONPATH=src python3 -m pytest -q tests && "
              "PYTHONPATH=src python3 -c "
              "'import durations; print(durations.parse_duration(\"1h\"))'",
    "unittest": "PYTHONPATH=src:tests python3 -m unittest discover -s tests -p 'test_*.py' -v; "
                "{fix}PYTHONPATH=src python3 -m unittest discover -s tests -p 'test_*.py'",
    "import": "{fix}PYTHONPATH=src python3 -c 'import durations, durations.parse; "
              "assert durations.parse_duration(\"1.5h\") == 5400'",
    "compileall": "{fix}python3 -m compileall -q src tests && "
                  "python3 -m compileall -q -b src && "  # Python 2's layout, foo.pyc beside foo.py
                  "PYTHONPATH=src python3 -m pytest -q tests",
}


@needs_bwrap
@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_command_agent_that_runs_things_is_accepted(name: str, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    out = tmp_path / "trial"
    res = _run(bundle, SESSIONS[name].format(fix=_fix_script()), out)
    assert res.grade is not None, res.record
    g = res.grade
    assert g.accepted is True, (g.failure_code, g.details.integrity)
    assert g.details.integrity.changes.model_dump() == {
        "added": [], "deleted": [], "modified": ["src/durations/parse.py"]}
    m = _manifest(out)
    excluded = {r["path"]: r for r in m["excluded"]["paths"]}
    assert "src/durations/__pycache__" in excluded, excluded
    if name in ("pytest", "compileall", "unittest"):
        assert "tests/__pycache__" in excluded, excluded
    if name == "pytest":
        assert ".pytest_cache" in excluded and excluded[".pytest_cache"]["rule"] == ".pytest_cache"
    if name == "compileall":
        assert excluded["src/durations/parse.pyc"]["rule"] == "*.pyc beside its .py"
    assert m["excluded"]["files"] == sum(r["files"] for r in excluded.values()) > 0
    assert m["excluded"]["bytes"] == sum(r["bytes"] for r in excluded.values()) > 0
    assert m["excluded"]["patterns"][:len(DEFAULT_IGNORED_PATHS)] == list(DEFAULT_IGNORED_PATHS)
    kept = {e["path"] for e in m["entries"]}
    assert not any("__pycache__" in p or p.endswith(".pyc") or ".pytest_cache" in p
                   for p in kept), kept
    # the workspace bounds are recorded as applied, like the sandbox's limits
    applied = res.record.execution["limits_applied"]
    assert applied["workspace_mib"]["value"] == 1024
    assert applied["workspace_files"]["value"] == 100_000
    assert applied["workspace_mib"]["mechanism"] == "freeze"


@needs_bwrap
def test_sourceless_bytecode_is_still_compiled_code_added(tmp_path: Path) -> None:
    """``compileall -b`` then deleting the source: Python would import the .pyc in its place."""
    bundle = _bundle(tmp_path)
    out = tmp_path / "trial"
    res = _run(bundle, _fix_script() + "python3 -m compileall -q -b src && "
               "rm src/durations/parse.py && PYTHONPATH=src python3 -m pytest -q tests", out)
    g = res.grade
    assert g is not None and g.accepted is False
    assert g.failure_code == "compiled_code_added", g.details.integrity
    problems = {(p["code"], p.get("path")) for p in g.details.integrity.problems}
    assert ("compiled_code_added", "src/durations/parse.pyc") in problems
    # its sibling, with a source beside it, was left out as a cache
    excluded = {r["path"] for r in _manifest(out)["excluded"]["paths"]}
    assert "src/durations/__init__.pyc" in excluded


@needs_bwrap
def test_a_task_can_narrow_and_extend_the_ignored_paths(tmp_path: Path) -> None:
    # narrowed to the pytest cache (and extended with logs): __pycache__ is then kept, in the
    # protected tests/ and as compiled code in src/
    bundle = _bundle(tmp_path, acceptance_extra="  ignored_paths: [.pytest_cache, '*.log']")
    out = tmp_path / "trial"
    res = _run(bundle, _fix_script() + "PYTHONPATH=src python3 -m pytest -q tests > run.log",
               out)
    g = res.grade
    assert g is not None and g.failure_code == "protected_file_changed", g.failure_code
    codes = {(p["code"], p.get("path", "").split("/")[0])
             for p in g.details.integrity.problems}
    assert {("protected_file_changed", "tests"), ("compiled_code_added", "src")} <= codes
    m = _manifest(out)
    # (the workspace's own repository, initial_state.git, is left out whatever the list says)
    assert m["excluded"]["patterns"] == [".pytest_cache", "*.log", ".git/**",
                                         "*.pyc beside its .py"]
    assert {r["path"] for r in m["excluded"]["paths"]} == {".pytest_cache", "run.log", ".git"}


def test_ignored_paths_that_would_hide_the_deliverable_are_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, acceptance_extra="  ignored_paths: ['**']")
    with pytest.raises(AssayError) as exc:
        load_bundle(bundle)
    assert "ignored_paths" in str(exc.value) and "task.yaml" in str(exc.value)


def test_caches_in_the_pristine_tree_are_not_changes(tmp_path: Path) -> None:
    """Integrity drops left-out paths on both sides: neither protected nor outside allowed."""
    pristine = [{"path": "tests", "type": "dir", "mode": "0755"},
                {"path": "tests/__pycache__", "type": "dir", "mode": "0755"},
                {"path": "tests/__pycache__/t.cpython-311.pyc", "type": "file", "mode": "0644",
                 "sha256": "a", "size": 1}]
    artifact = [{"path": "tests", "type": "dir", "mode": "0755"}]
    kw: dict[str, Any] = {"protected": ["tests/**"], "allowed": ["src/**"]}
    bare = check_integrity(pristine, artifact, **kw)
    assert bare.failure_code == "protected_file_changed"
    res = check_integrity(pristine, artifact, ignored=list(DEFAULT_IGNORED_PATHS), **kw)
    assert res.passed and res.changes.all == []


# ------------------------------------------------------------- extraction stays inside

def _tar(path: Path, members: list[tuple[str, str, str]]) -> None:
    """A hand-written archive: (name, kind, data or link target)."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, kind, data in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data.encode()))
            else:
                ti.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                ti.linkname = data
                tar.addfile(ti)


@pytest.mark.parametrize("members", [
    [("../escaped", "file", "x")],
    [("/tmp/escaped-abs", "file", "x")],
    [("lnk", "symlink", "{outside}"), ("lnk/escaped", "file", "x")],
    [("plink/escaped", "file", "x")],  # through a link of the pristine tree
    [("hard", "hardlink", "../{outside_name}/escaped")],
], ids=["dotdot", "absolute", "through-own-link", "through-pristine-link", "hard-link-out"])
def test_extraction_never_writes_outside_the_tree(members: list[tuple[str, str, str]],
                                                  tmp_path: Path) -> None:
    from assay.records.artifact import extract_paths

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "escaped").write_text("original")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "plink").symlink_to(outside)
    trial = tmp_path / "trial"
    trial.mkdir()
    members = [(n, k, d.format(outside=outside, outside_name="outside")) for n, k, d in members]
    _tar(trial / "artifact.tar", members)
    with pytest.raises(ValueError, match="refusing to extract"):
        extract_paths(trial, dest, {m[0] for m in members})
    assert sorted(p.name for p in outside.iterdir()) == ["escaped"]
    assert (outside / "escaped").read_text() == "original"
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped-abs").exists()


def test_bulk_extraction_rebuilds_the_tree_exactly(tmp_path: Path) -> None:
    """Past BULK_EXTRACT_MIN paths GNU tar unpacks and the paths are moved into place: the
    rebuilt tree lists exactly as the frozen one (types, modes, digests, links, hard links),
    and a name below a link of the pristine tree is still refused."""
    from assay.records.artifact import BULK_EXTRACT_MIN, extract_paths, list_tree

    ws = tmp_path / "ws"
    for i in range(BULK_EXTRACT_MIN + 100):
        d = ws / "src" / f"d{i // 500}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(str(i))
    (ws / "src" / "run.sh").write_text("#!/bin/sh\n")
    (ws / "src" / "run.sh").chmod(0o755)
    (ws / "src" / "lnk").symlink_to("d0/f0.txt")
    os.link(ws / "src" / "d0" / "f1.txt", ws / "src" / "hard.txt")
    (ws / "src" / "locked").mkdir()
    (ws / "src" / "locked" / "inside.txt").write_text("in")
    (ws / "src" / "locked").chmod(0o555)
    trial = tmp_path / "trial"
    trial.mkdir()
    manifest = freeze(ws, trial)
    dest = tmp_path / "dest"
    dest.mkdir()
    extract_paths(trial, dest, {e["path"] for e in manifest["entries"]})

    def strip(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "inode"} for e in entries]

    assert strip(list_tree(dest)) == strip(manifest["entries"])
    assert os.stat(dest / "src" / "hard.txt").st_ino == os.stat(dest / "src/d0/f1.txt").st_ino

    other = tmp_path / "dest2"
    other.mkdir()
    (other / "src").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").mkdir()
    with pytest.raises(ValueError, match="refusing to extract"):
        extract_paths(trial, other, {e["path"] for e in manifest["entries"]} - {"src"})
    assert list((tmp_path / "outside").iterdir()) == []
    (ws / "src" / "locked").chmod(0o755)
    (dest / "src" / "locked").chmod(0o755)


# ------------------------------------------------------------- the walk and its bounds

def test_walk_is_bounded_and_iterative(tmp_path: Path) -> None:
    """A chain far deeper than Python's recursion limit is refused at the depth bound, with
    no RecursionError, and the freeze writes nothing."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY)
    try:
        for _ in range(1500):  # openat all the way down: no path ever grows past PATH_MAX
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    try:
        limits = WorkspaceLimits(max_bytes=1 << 30, max_entries=100_000)
        with pytest.raises(WorkspaceOverLimit) as exc:
            walk_workspace(ws, ignored=DEFAULT_IGNORED_PATHS, limits=limits, match=glob_match)
        assert exc.value.figure["limit"] == "depth" and exc.value.figure["bound"] == MAX_DEPTH
        trial = tmp_path / "t"
        trial.mkdir()
        with pytest.raises(WorkspaceOverLimit):
            freeze(ws, trial, limits=limits)
        assert list(trial.iterdir()) == []
    finally:
        remove_tree(ws)  # pytest's own cleanup would recurse through the chain
    assert not ws.exists()


def _assert_refused(res: TrialResult, out: Path, limit: str) -> Grade:
    g = res.grade
    assert g is not None, res.record
    assert g.accepted is False and g.failure_code == "resource_limit", g.failure_code
    assert g.validity == Validity(status="valid")
    ex = res.record.execution
    assert ex["status"] == "resource_limit" and ex["reason"] == "workspace_limit"
    assert ex["workspace_limit"]["limit"] == limit, ex["workspace_limit"]
    assert ex["workspace_limit"]["counted"] > ex["workspace_limit"]["bound"]
    assert g.details.workspace_refused["limit"] == limit
    m = _manifest(out)
    assert m["tar_sha256"] is None and m["entries"] == [] and m["refused"]["limit"] == limit
    # nothing large was written: no tar at all, and the trial directory stays small
    assert not (out / "artifact.tar").exists()
    assert _du(out) < 2 << 20, _du(out)
    return ex["workspace_limit"]


@needs_bwrap
def test_one_gib_sparse_file_is_refused_without_writing_it(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)  # the default 1024 MiB
    out = tmp_path / "trial"
    res = _run(bundle, _fix_script() + "truncate -s 1G src/durations/blob.bin", out)
    figure = _assert_refused(res, out, "workspace_mib")
    assert figure["bound"] == 1024 << 20 and figure["bytes_counted"] >= 1 << 30


@needs_bwrap
def test_many_empty_files_are_refused(tmp_path: Path) -> None:
    n, limit = (200_000, None) if FULL else (3_000, 1_000)
    bundle = _bundle(tmp_path, resources=None if limit is None else f"workspace_files: {limit}")
    out = tmp_path / "trial"
    res = _run(bundle, "mkdir -p src/many && cd src/many && "
               f"seq 1 {n} | xargs touch", out)
    figure = _assert_refused(res, out, "workspace_files")
    assert figure["bound"] == (limit or 100_000)
    assert figure["counted"] == figure["bound"] + 1  # the walk stopped at the first crossing


@needs_bwrap
def test_deep_directory_chain_is_refused_and_cleaned_up(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    out = tmp_path / "trial"
    res = _run(bundle, "cd src && i=0; while [ $i -lt 2000 ]; do mkdir d && cd d || exit 1; "
               "i=$((i+1)); done; echo x > leaf.txt", out)
    figure = _assert_refused(res, out, "depth")
    assert figure["bound"] == MAX_DEPTH


@needs_bwrap
def test_file_that_keeps_growing_until_the_freeze_is_refused(tmp_path: Path) -> None:
    """A writer the agent leaves running grows a file until the sandbox ends it (at the
    agent's exit); the freeze measures what is there then."""
    bundle = _bundle(tmp_path, resources="workspace_mib: 8")
    out = tmp_path / "trial"
    res = _run(bundle, "(while :; do head -c 1048576 /dev/zero >> src/grow.bin; sleep 0.02; "
               "done) & sleep 3", out)
    figure = _assert_refused(res, out, "workspace_mib")
    assert figure["bound"] == 8 << 20 and figure["bytes_counted"] > 8 << 20


def test_a_killed_runners_verifier_trees_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    """The verifier's trees may sit in the memory file system; a runner killed with SIGKILL
    never removes its own, so the next process sweeps the ones whose owner is gone: a real
    process that exited, beside this process's own, a living one's and another namespace's."""
    import subprocess
    import sys

    from assay.records.workspace import owner_tag, sweep_dead_owners, verify_prefix

    ns, me = owner_tag().split(".")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {"dead": f"assay-verifier-{ns}.{dead.pid}-x1",
                 "dead_copy": f"assay-verify-{ns}.{dead.pid}-x2",
                 "mine": verify_prefix("verifier") + "x3",
                 "alive": f"assay-verify-{ns}.{alive.pid}-x4",
                 "other_ns": f"assay-verifier-1.{dead.pid}-x5",
                 "unrelated": "assay-trial-123"}
        for name in names.values():
            (tmp_path / name / "deep" / "er").mkdir(parents=True)
        removed = sweep_dead_owners(tmp_path)
    finally:
        alive.kill()
        alive.wait()
    assert sorted(Path(p).name for p in removed) == sorted([names["dead"], names["dead_copy"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {names["mine"], names["alive"], names["other_ns"], names["unrelated"]}
    assert names["mine"].startswith(f"assay-verifier-{ns}.{me}-")


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@needs_bwrap
def test_a_tree_too_large_to_prepare_in_the_verifier_time_fails_as_the_candidates(
        tmp_path: Path) -> None:
    """Rebuilding a delivered tree of many files on the host counts against the candidate: over
    ``verifier_wall_seconds`` every check fails with ``candidate_timeout`` without running, the
    trial is graded (never retried), and the record says how long it took. Reduced form: 20,000
    files against a 0.15 s limit (the issue's scenario is 100,000 files against 15 s; each file
    the agent makes is also carried back from its size-limited filesystem, about 0.5 ms each
    here, which 40,000 made a 20 s test)."""
    bundle = _bundle(tmp_path)
    yaml_path = bundle / "task.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("verifier_wall_seconds: 60",
                                                       "verifier_wall_seconds: 0.15"))
    out = tmp_path / "trial"
    res = _run(bundle, _fix_script() + "mkdir -p src/many && cd src/many && "
               "seq 1 20000 | xargs touch", out)
    g = res.grade
    assert g is not None and g.validity == Validity(status="valid"), g
    prep = g.details.preparation
    if not prep["over"]:
        pytest.skip(f"this machine rebuilt 20,000 files in {prep['seconds']} s, inside 0.15 s, "
                    f"or the starting tree took {prep['pristine_seconds']} s")
    assert g.accepted is False and g.failure_code == "candidate_timeout"
    assert prep["entries"] > 20_000 and prep["seconds"] > 0.15 > 2 * prep["pristine_seconds"]
    for name in ("behavior", "regression"):
        assert getattr(g.details, name)["reason"] == "not_run"
        assert "preparing the delivered tree" in getattr(g.details, name)["why"]
