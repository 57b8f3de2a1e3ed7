"""The test ids a check must report, learned from trusted code only.

The candidate's code can hide a test from the runner as easily as it can fake a pass, so the
list of tests a check must report passed cannot come from the candidate's own run. It is
collected by the verifier on the **pristine starting tree with the task's reference solution
applied** (``solution/solve.patch``; the pristine tree alone when the bundle has none): that tree
holds no candidate code, and with the solution applied a hidden test that imports a name the fix
adds is still collected. The same command runs in collect mode (the pytest reporter records the
ids and runs nothing; node's runner has no such mode, so a node command runs in full and its TAP
report lists the ids), with a canary pair planted in every test file, which also tells which
files' canaries the command collects at all.

Collecting costs a pytest start-up per check, so the result is cached on the host, outside any
sandbox, under a key made of everything it depends on (the command, the starting tree's digest,
the hidden tests, the solution, the reporter itself); a changed bundle is a new key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from assay.grading.check_run import reporter_source, run_command
from assay.grading.test_report import parse_report, parse_tap
from assay.records.io import atomic_write_json
from assay.suites.bundle import Bundle, tree_digest

CACHE_VERSION = 2


def cache_dir() -> Path:
    base = os.environ.get("ASSAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "assay")
    return Path(base) / "expected-tests"


def _solution(bundle: Bundle) -> Path | None:
    patch = bundle.solution_dir / "solve.patch"
    return patch if patch.is_file() else None


def cache_key(bundle: Bundle, command: str, fixture_digest: str) -> str:
    patch = _solution(bundle)
    parts = {
        "version": CACHE_VERSION,
        "reporter": hashlib.sha256(reporter_source()).hexdigest(),
        "command": command,
        "fixture_digest": fixture_digest,
        "tests": tree_digest(bundle.tests_dir) if bundle.tests_dir.is_dir() else None,
        "solution": hashlib.sha256(patch.read_bytes()).hexdigest() if patch else None,
        "protected_paths": bundle.spec.acceptance.protected_paths,
        "limits": [bundle.spec.budget.verifier_wall_seconds,
                   bundle.spec.resources.memory_limit_mib, bundle.spec.resources.pids],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _apply_solution(tree: Path, patch: Path) -> str | None:
    """Apply the reference fix on the host (task author's code, as trusted as the tests);
    None on success, else why not."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    res = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())],
                         cwd=tree, capture_output=True, timeout=60, env=env, check=False)
    if res.returncode != 0:
        return res.stderr.decode(errors="replace").strip()[-300:] or "git apply failed"
    return None


def collect(bundle: Bundle, command: str, pristine: Path) -> dict[str, Any]:
    """Run the collection (no cache): ``{"report": bool, "ids", "canary_files",
    "collect_errors", "source"}``."""
    patch = _solution(bundle)
    with tempfile.TemporaryDirectory(prefix="assay-collect-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(pristine, tree, symlinks=True)
        source = "pristine starting tree"
        if patch is not None:
            why = _apply_solution(tree, patch)
            source = ("pristine starting tree + solution/solve.patch" if why is None
                      else f"pristine starting tree (solve.patch did not apply: {why})")
        run = run_command(command, tree, bundle, record_dir=None, tamper_evident=True,
                          mode="collect")
    runner = run.runner
    rep = parse_tap(run.tap_text) if runner == "node" else parse_report(run.report_text)
    if rep is None or rep.sessions == 0:
        return {"report": False, "runner": None, "ids": [], "canary_files": [],
                "collect_errors": [], "source": source, "exit_code": run.result.exit_code,
                "reason": run.result.reason, "wall_seconds": round(run.result.wall_seconds, 3)}
    names = {c.name: c for c in run.canaries}
    ids, files = [], set()
    for nodeid in rep.collected:
        name = nodeid.rsplit("::", 1)[-1].rsplit(" > ", 1)[-1]
        if name in names:
            files.add(names[name].file)
        else:
            ids.append(nodeid)
    return {"report": True, "runner": runner, "ids": sorted(set(ids)),
            "canary_files": sorted(files),
            "collect_errors": rep.collect_errors, "source": source,
            "exit_code": run.result.exit_code, "reason": run.result.reason}


#: Commands that ran cleanly on the trusted tree without writing a structured report (not a
#: runner assay reads: unittest, a script), per process. Such a command runs in full there, so
#: asking again for every trial doubled each check's cost. Kept in memory only: a later
#: process must see a changed environment (pytest installed since, say), which the disk
#: cache's key does not cover.
_NO_REPORT: dict[str, dict[str, Any]] = {}


def expected_tests(bundle: Bundle, command: str, pristine: Path,
                   fixture_digest: str) -> dict[str, Any]:
    """The trusted collection for ``command``, from the cache when it is there."""
    key = cache_key(bundle, command, fixture_digest)
    if key in _NO_REPORT:
        return {**_NO_REPORT[key], "cache": "hit (this process)"}
    path = cache_dir() / f"{key}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and cached.get("key") == key:
            return {**cached, "cache": "hit"}
    except (OSError, ValueError):
        pass
    found = collect(bundle, command, pristine)
    found["key"] = key
    if not found["report"] and found["reason"] == "ok" and found["exit_code"] == 0:
        _NO_REPORT[key] = found
    if found["report"] and found["reason"] not in ("timeout", "sandbox_error"):
        try:
            atomic_write_json(path, found)
        except OSError:
            pass  # a read-only cache only costs time
    return {**found, "cache": "miss"}
