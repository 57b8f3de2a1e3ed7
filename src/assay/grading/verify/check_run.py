"""Running one acceptance command in a fresh sandbox, the way the verifier needs it run.

Each run gets private copies of the workspace and of the hidden tests (so canaries can be
planted without touching the bundle), an empty HOME, a read-only Python user site holding assay's
reporter (under a module name drawn per run, enabled through ``PYTEST_PLUGINS`` whatever shell
command the task wrote) and its start-up guard (``pytest_boot.py``, run by a ``.pth`` line in
every Python process of the check), and a report path drawn at random.

No bytecode of the deliverable is ever read or written, three ways over: every ``__pycache__``
folder and stray ``.pyc`` is removed from the private copy before the command starts,
``PYTHONDONTWRITEBYTECODE`` is set (``-B``), and the start-up guard gives every directory outside
the interpreter's installation an import finder that compiles ``.py`` sources afresh and never
looks at bytecode, so even a ``.pyc`` the candidate's code writes while the check runs is never
loaded. (``PYTHONPYCACHEPREFIX`` at an empty directory would also hide the interpreter's own
cached stdlib and pytest, and recompiling those tripled the time of every check.) The same guard
resolves pytest and its dependencies from the interpreter's installation before any path of the
deliverable; :func:`runner_shadows` lists what of the deliverable it shadowed, for the grade.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from assay.environments.run import (
    HOST_PYTHON_MOUNT,
    host_python_mounts,
    image_has_pytest,
    task_root,
)
from assay.grading.verify.canaries import TESTS_MOUNT, Canary, is_js_test_file, is_test_file, plant
from assay.grading.verify.canary_derive import (
    MAX_PER_FILE,
    MAX_PER_KNOWN_FILE,
    Mutation,
    draw,
    plant_for_validation,
    text_sha256,
)
from assay.grading.verify.reward import RewardReading, read_reward
from assay.records.workspace import copy_tree, scratch_beside, verify_prefix
from assay.sandbox import ExecResult, Limits, Mount, run_sandboxed
from assay.sandbox.userns import readable_by_all
from assay.suites.bundle import Bundle, RewardFile
from assay.suites.patterns import matches_any

HOME_MOUNT = "/assay/home"
PYUSER_MOUNT = "/assay/pyuser"
REPORTER_MODULE = "assay_verifier_reporter"
BOOT_MODULE = "assay_verifier_boot"
_REPORTER_SOURCE = Path(__file__).with_name("pytest_reporter.py")
_BOOT_SOURCE = Path(__file__).with_name("pytest_boot.py")
# The .pth line: executes the guard by its absolute path (``sitedir`` is site.addpackage's own
# variable), never by a module name something on the deliverable's path could answer to.
_BOOT_PTH = (f'import os; p = os.path.join(sitedir, "{BOOT_MODULE}.py"); '
             f'exec(compile(open(p, "rb").read(), p, "exec"), '
             f'{{"__name__": "{BOOT_MODULE}", "__file__": p}})\n')
#: Top-level names the guard resolves from the interpreter only (kept equal to
#: pytest_boot.RUNNER_MODULES, which cannot import assay; a test checks they agree).
RUNNER_MODULES = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "attr", "attrs",
    "exceptiongroup", "tomli", "sitecustomize", "usercustomize"})
# Python versions whose user site gets the reporter; the sandbox runs the system python3.
_PY_VERSIONS = [f"3.{minor}" for minor in range(8, 20)]


def reporter_source() -> bytes:
    """What the trusted collection depends on: the reporter and the start-up guard."""
    return _REPORTER_SOURCE.read_bytes() + _BOOT_SOURCE.read_bytes()


def runner_shadows(root: Path, *, limit: int = 50) -> list[str]:
    """Paths of the deliverable named like the test runner's own modules (``iniconfig/``,
    ``pytest.py``, ``sitecustomize.py``, ``assay_verifier_*``): the start-up guard shadows them,
    so they are never imported by a check; the grade lists them. Bounded walk, no links."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "node_modules",
                                                                ".git"))
        rel = Path(dirpath).relative_to(root)
        names = [d for d in dirnames if _runner_name(d)]
        names += [f for f in sorted(filenames) if f.endswith((".py", ".pyc", ".so", ".pth"))
                  and _runner_name(f.split(".", 1)[0])]
        for name in names:
            found.append((rel / name).as_posix())
            if len(found) >= limit:
                return found
    return found


def _runner_name(name: str) -> bool:
    return name in RUNNER_MODULES or name.startswith("assay_verifier_")


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


def _user_site(base: Path, reporter: str | None, *, host_python: bool = False) -> None:
    """``host_python``: the check runs in a pinned image, whose interpreter gets the host's
    trusted pytest from :data:`HOST_PYTHON_MOUNT` (a ``.pth`` line puts that folder on the
    path right after this user site, before the image's own site-packages; the start-up guard
    trusts it and resolves the runner's modules there first)."""
    for version in _PY_VERSIONS:
        site = base / "lib" / f"python{version}" / "site-packages"
        site.mkdir(parents=True)
        if reporter is not None:
            (site / f"{reporter}.py").write_bytes(_REPORTER_SOURCE.read_bytes())
        (site / f"{BOOT_MODULE}.py").write_bytes(_BOOT_SOURCE.read_bytes())
        (site / f"{BOOT_MODULE}.pth").write_text(_BOOT_PTH)
        if host_python:
            (site / "assay_verifier_host.pth").write_text(HOST_PYTHON_MOUNT + "\n")


@dataclass
class DerivedPlan:
    """Derived canaries for one run: per planted file (``tests/<rel>`` or ``work/<rel>``) the
    text digest they were made from and the copies; ``validate`` plants every copy (on the
    trusted tree), ``draw`` one verification's draw from ``seed``."""

    files: dict[str, tuple[str, list[Mutation]]]
    mode: str
    seed: int


def _plant_derived(root: Path, label: str, rels: list[str], plan: DerivedPlan,
                   ) -> tuple[list[Canary], dict[str, Mutation]]:
    rng = random.Random(plan.seed)
    planted: list[Canary] = []
    sources: dict[str, Mutation] = {}
    for rel in rels:
        key = f"{label}/{rel}"
        entry = plan.files.get(key)
        path = root / rel
        if entry is None or path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        digest, mutations = entry
        if text_sha256(text) != digest or not mutations:
            continue  # not the file the copies were made from (a changed protected test)
        if plan.mode == "validate":
            new, names = plant_for_validation(text, mutations, rng)
            chosen = list(names.items())
        else:
            new, chosen = draw(text, mutations, rng, MAX_PER_FILE if label == "tests"
                               else MAX_PER_KNOWN_FILE)
        path.write_text(new, encoding="utf-8")
        for name, m in chosen:
            sources[name] = m
            planted.append(Canary(name, key, "fail", kind="derived", origin=m.origin,
                                  change=m.kind, items=m.fail_items))
    return planted, sources


@dataclass
class CheckRun:
    """One command's execution and what the reporters wrote (None: no report file at all):
    assay's pytest reporter, and node's TAP reporter."""

    result: ExecResult
    report_text: str | None
    canaries: list[Canary]
    bytecode_removed: list[str]
    tap_text: str | None = None
    #: what :func:`assay.grading.verify.reward.read_reward` found, for a check with a reward file
    reward: RewardReading | None = None
    #: the derived canaries' copies by planted name (validation reads their outcomes)
    derived_sources: dict[str, Mutation] | None = None

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


def _same_file(a: Path, b: Path) -> bool:
    """Whether two regular files (no links) hold the same bytes."""
    try:
        if a.is_symlink() or b.is_symlink() or not a.is_file() or not b.is_file():
            return False
        if a.stat().st_size != b.stat().st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def canary_targets(bundle: Bundle, work: Path, tests: Path, *,
                   pristine: Path | None = None) -> tuple[list[str], list[str]]:
    """The files canaries go into: every test file of the hidden tests, and the task's own
    test files of the workspace under its protected paths. Canaries belong to the verifier:
    with ``pristine`` (the starting tree), a workspace test file the agent added or changed
    gets none, so a canary's deliberate failure can never be charged to a test the agent wrote
    (the protected change itself is integrity's business). Without it the tree is trusted (the
    reference solution's), and every protected test file is the task's."""
    protected = bundle.spec.acceptance.protected_paths
    own = [r for r in _test_files(work) if matches_any(r, protected)]
    if pristine is not None:
        own = [r for r in own if _same_file(work / r, pristine / r)]
    return _test_files(tests), own


def run_command(command: str, workspace: Path, bundle: Bundle, *, record_dir: Path | None,
                tamper_evident: bool, mode: str = "run", canaries: bool = True,
                reward: RewardFile | None = None, derived: DerivedPlan | None = None,
                pristine: Path | None = None) -> CheckRun:
    """``command`` under ``sh -c`` over private copies; with ``tamper_evident`` the reporter is
    enabled, (``canaries``) a random canary pair is planted in every test file of the task
    (:func:`canary_targets`; ``pristine`` tells the task's workspace test files from the
    agent's) and (``derived``) the derived canaries of the plan. With ``reward`` an
    empty directory of this run's own is mounted at ``reward.dir`` and read once it ended."""
    spec = bundle.spec
    with tempfile.TemporaryDirectory(prefix=verify_prefix("verify"),
                                     dir=scratch_beside(workspace)) as tmp_name:
        tmp = Path(tmp_name)
        work, home, tests = tmp / "work", tmp / "home", tmp / "tests"
        copy_tree(workspace, work)  # cp -a: a large tree costs a copy, not a Python loop
        if bundle.tests_dir.is_dir():
            shutil.copytree(bundle.tests_dir, tests, symlinks=True)
            readable_by_all(tests)  # the sandbox's users are not the copy's owner
        else:
            tests.mkdir()
        home.mkdir()
        removed = strip_bytecode(work)
        env = {"ASSAY_TESTS": TESTS_MOUNT, "HOME": HOME_MOUNT, "PYTHONDONTWRITEBYTECODE": "1",
               # No pytest plugin loads unless the command names it: a candidate could otherwise
               # ship one (a *.dist-info entry point on PYTHONPATH) that marks every test passed.
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "ASSAY_TASK_ID": spec.id}
        token = secrets.token_hex(8)
        pyuser = tmp / "pyuser"
        reporter = f"{REPORTER_MODULE}_{token}" if tamper_evident else None
        image = task_root(bundle)
        # The trusted pytest is lent for assay's reporter: a tamper-evident check's counts come
        # from it. A reward check (not tamper-evident) is the task's own script, judged by the
        # reward it writes: it runs the image's own pytest and plugins, as the task pinned them
        # (Harbor's CTRF plugin needs the pytest it was installed with); an image with no pytest
        # of its own still gets the trusted one.
        lend = image is not None and (tamper_evident or not image_has_pytest(image.rootfs))
        _user_site(pyuser, reporter, host_python=lend)
        env["PYTHONUSERBASE"] = PYUSER_MOUNT  # the start-up guard, in every check
        mounts = [Mount(tests, TESTS_MOUNT, writable=False), Mount(home, HOME_MOUNT, writable=True),
                  Mount(pyuser, PYUSER_MOUNT, writable=False)]
        if lend:  # the trusted pytest, lent read-only to the image's python3
            mounts += host_python_mounts()
        planted: list[Canary] = []
        sources: dict[str, Mutation] = {}
        report_file: Path | None = None
        tap_file: Path | None = None
        if tamper_evident:
            out = tmp / "out"
            out.mkdir()
            report_name, tap_name = f"r-{token}.jsonl", f"n-{token}.tap"
            out_mount = f"/assay/out-{token}"
            mounts.append(Mount(out, out_mount, writable=True))
            # The reporter's module name is drawn per run: nothing on the deliverable's path
            # can answer to it (pytest's plugin import would look there first).
            env.update({"PYTEST_PLUGINS": str(reporter),
                        "ASSAY_VERIFIER_REPORT": f"{out_mount}/{report_name}",
                        "ASSAY_VERIFIER_MODE": mode,
                        # node's test runner: its usual report on stdout, TAP to our file
                        "NODE_OPTIONS": "--test-reporter=tap --test-reporter-destination=stdout"
                                        f" --test-reporter=tap --test-reporter-destination="
                                        f"{out_mount}/{tap_name}"})
            report_file, tap_file = out / report_name, out / tap_name
            hidden, own = canary_targets(bundle, work, tests, pristine=pristine)
            if derived is not None:
                # the copies first: they are made from (and checked against) the files as the
                # task wrote them, before a random pair goes in
                for root, label, rels in ((tests, "tests", hidden), (work, "work", own)):
                    got, src = _plant_derived(root, label, rels, derived)
                    planted += got
                    sources.update(src)
            if canaries:
                planted += plant(tests, "tests", hidden) + plant(work, "work", own)
        reward_dir: Path | None = None
        if reward is not None:
            reward_dir = tmp / "reward"
            reward_dir.mkdir()
            mounts.append(Mount(reward_dir, reward.dir, writable=True))
        limits = Limits(wall_seconds=spec.budget.verifier_wall_seconds,
                        memory_mib=spec.resources.memory_limit_mib, pids=spec.resources.pids,
                        cpu_cores=spec.resources.cpu_cores)
        result = run_sandboxed(["sh", "-c", command], work, limits=limits, env=env,
                               mounts=mounts, record_dir=record_dir, image=image)
        text = _read(report_file) if report_file is not None else None
        tap = _read(tap_file) if tap_file is not None else None
        found = (read_reward(reward_dir, reward.threshold)
                 if reward is not None and reward_dir is not None else None)
    return CheckRun(result, text, planted, removed, tap, found, sources)


def _read(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return None
    return path.read_bytes()[:8 << 20].decode("utf-8", errors="replace")
