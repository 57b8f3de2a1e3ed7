"""Running one acceptance command in a fresh sandbox, the way the verifier needs it run.

Each run gets private copies of the workspace and of the hidden tests (so canaries can be
planted without touching the bundle), an empty HOME, assay's reporter in a read-only Python
user site enabled through ``PYTEST_PLUGINS`` (whatever shell command the task wrote), and a
report path drawn at random. No bytecode from the workspace is ever read: ``-B`` and
``PYTHONDONTWRITEBYTECODE`` only stop writing it, so every ``__pycache__`` folder and stray
``.pyc`` is removed from the private copy before the command starts. (``PYTHONPYCACHEPREFIX``
at an empty directory would do it too, but it also hides the interpreter's own cached stdlib
and pytest, and recompiling those tripled the time of every check.)
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.grading.canaries import Canary, is_js_test_file, is_test_file, plant
from assay.grading.reward import read_reward
from assay.records.workspace import copy_tree, scratch_beside, verify_prefix
from assay.sandbox import ExecResult, Limits, Mount, run_sandboxed
from assay.suites.bundle import Bundle, RewardFile
from assay.suites.patterns import matches_any

TESTS_MOUNT = "/assay/tests"
HOME_MOUNT = "/assay/home"
PYUSER_MOUNT = "/assay/pyuser"
REPORTER_MODULE = "assay_verifier_reporter"
_REPORTER_SOURCE = Path(__file__).with_name("pytest_reporter.py")
# Python versions whose user site gets the reporter; the sandbox runs the system python3.
_PY_VERSIONS = [f"3.{minor}" for minor in range(8, 20)]


def reporter_source() -> bytes:
    return _REPORTER_SOURCE.read_bytes()


def strip_bytecode(root: Path) -> list[str]:
    """Remove ``__pycache__`` folders and ``.pyc``/``.pyo`` files below ``root``; returns what
    was removed (relative paths), for the record."""
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for d in list(dirnames):
            if d == "__pycache__":
                p = Path(dirpath) / d
                removed.append(p.relative_to(root).as_posix())
                if p.is_symlink():
                    p.unlink()
                else:
                    shutil.rmtree(p, ignore_errors=True)
                dirnames.remove(d)
        for f in filenames:
            if f.endswith((".pyc", ".pyo")):
                p = Path(dirpath) / f
                removed.append(p.relative_to(root).as_posix())
                p.unlink()
    return sorted(removed)


def _user_site(base: Path) -> None:
    for version in _PY_VERSIONS:
        site = base / "lib" / f"python{version}" / "site-packages"
        site.mkdir(parents=True)
        (site / f"{REPORTER_MODULE}.py").write_bytes(reporter_source())


@dataclass
class CheckRun:
    """One command's execution and what the reporters wrote (None: no report file at all):
    assay's pytest reporter, and node's TAP reporter."""

    result: ExecResult
    report_text: str | None
    canaries: list[Canary]
    bytecode_removed: list[str]
    tap_text: str | None = None
    #: what :func:`assay.grading.reward.read_reward` found, for a check with a reward file
    reward: dict[str, Any] | None = None

    @property
    def runner(self) -> str | None:
        """Which structured report this run produced: ``pytest``, ``node`` or None."""
        if self.report_text and self.report_text.strip():
            return "pytest"
        if self.tap_text and self.tap_text.strip():
            return "node"
        return None

    @property
    def structured(self) -> str | None:
        return self.report_text if self.runner != "node" else self.tap_text


def _test_files(root: Path) -> list[str]:
    """Test files below ``root`` (links not followed, ``node_modules`` skipped), relative and
    sorted. Names are tested before anything is asked of the file system: this runs over every
    file of the candidate's tree, which may hold a hundred thousand."""
    base = str(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != "node_modules"]
        rel_dir = dirpath[len(base) + 1:]
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if is_test_file(rel) or is_js_test_file(rel):
                full = os.path.join(dirpath, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    found.append(rel)
    return sorted(found)


def canary_targets(bundle: Bundle, work: Path, tests: Path) -> tuple[list[str], list[str]]:
    """The files canaries go into: every test file of the hidden tests, and every test file
    of the workspace under the task's protected paths."""
    protected = bundle.spec.acceptance.protected_paths
    return _test_files(tests), [r for r in _test_files(work) if matches_any(r, protected)]


def run_command(command: str, workspace: Path, bundle: Bundle, *, record_dir: Path | None,
                tamper_evident: bool, mode: str = "run", canaries: bool = True,
                reward: RewardFile | None = None) -> CheckRun:
    """``command`` under ``sh -c`` over private copies; with ``tamper_evident`` the reporter is
    enabled and (``canaries``) a canary pair is planted in every test file. With ``reward`` an
    empty directory of this run's own is mounted at ``reward.dir`` and read once it ended."""
    spec = bundle.spec
    with tempfile.TemporaryDirectory(prefix=verify_prefix("verify"),
                                     dir=scratch_beside(workspace)) as tmp_name:
        tmp = Path(tmp_name)
        work, home, tests = tmp / "work", tmp / "home", tmp / "tests"
        copy_tree(workspace, work)  # cp -a: a large tree costs a copy, not a Python loop
        if bundle.tests_dir.is_dir():
            shutil.copytree(bundle.tests_dir, tests, symlinks=True)
        else:
            tests.mkdir()
        home.mkdir()
        removed = strip_bytecode(work)
        env = {"ASSAY_TESTS": TESTS_MOUNT, "HOME": HOME_MOUNT, "PYTHONDONTWRITEBYTECODE": "1",
               # No pytest plugin loads unless the command names it: a candidate could otherwise
               # ship one (a *.dist-info entry point on PYTHONPATH) that marks every test passed.
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "ASSAY_TASK_ID": spec.id}
        mounts = [Mount(tests, TESTS_MOUNT, writable=False), Mount(home, HOME_MOUNT, writable=True)]
        planted: list[Canary] = []
        report_file: Path | None = None
        tap_file: Path | None = None
        if tamper_evident:
            pyuser, out = tmp / "pyuser", tmp / "out"
            _user_site(pyuser)
            out.mkdir()
            token = secrets.token_hex(8)
            report_name, tap_name = f"r-{token}.jsonl", f"n-{token}.tap"
            out_mount = f"/assay/out-{token}"
            mounts += [Mount(pyuser, PYUSER_MOUNT, writable=False),
                       Mount(out, out_mount, writable=True)]
            env.update({"PYTHONUSERBASE": PYUSER_MOUNT, "PYTEST_PLUGINS": REPORTER_MODULE,
                        "ASSAY_VERIFIER_REPORT": f"{out_mount}/{report_name}",
                        "ASSAY_VERIFIER_MODE": mode,
                        # node's test runner: its usual report on stdout, TAP to our file
                        "NODE_OPTIONS": "--test-reporter=tap --test-reporter-destination=stdout"
                                        f" --test-reporter=tap --test-reporter-destination="
                                        f"{out_mount}/{tap_name}"})
            report_file, tap_file = out / report_name, out / tap_name
            if canaries:
                hidden, own = canary_targets(bundle, work, tests)
                planted = plant(tests, "tests", hidden) + plant(work, "work", own)
        reward_dir: Path | None = None
        if reward is not None:
            reward_dir = tmp / "reward"
            reward_dir.mkdir()
            mounts.append(Mount(reward_dir, reward.dir, writable=True))
        limits = Limits(wall_seconds=spec.budget.verifier_wall_seconds,
                        memory_mib=spec.resources.memory_limit_mib, pids=spec.resources.pids,
                        cpu_cores=spec.resources.cpu_cores)
        result = run_sandboxed(["sh", "-c", command], work, limits=limits, env=env,
                               mounts=mounts, record_dir=record_dir)
        text = _read(report_file) if report_file is not None else None
        tap = _read(tap_file) if tap_file is not None else None
        found = (read_reward(reward_dir, reward.threshold)
                 if reward is not None and reward_dir is not None else None)
    return CheckRun(result, text, planted, removed, tap, found)


def _read(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return None
    return path.read_bytes()[:8 << 20].decode("utf-8", errors="replace")
