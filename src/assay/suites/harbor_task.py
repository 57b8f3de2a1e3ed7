"""``assay task import-harbor``: Harbor task folders become assay task bundles.

A Harbor task is ``task.toml``, ``instruction.md``, ``environment/`` (a Dockerfile), ``tests/``
(``test.sh``, which writes a reward to ``/logs/verifier/reward.txt``) and ``solution/``
(``solve.sh``). The bundle keeps each part in assay's place for it: the instruction, the starting
tree (what the Dockerfile copies into its ``WORKDIR``), the hidden tests, the reference solution,
the budgets and resources, and one ``behavior`` check that runs ``test.sh`` in the verifier's
sandbox with an empty directory of its own mounted at ``/logs/verifier``: the verifier reads the
reward from there once the run ended, never from anything the agent could have written.

Harbor's absolute paths are rewritten once, at import, to the sandbox's (the ``WORKDIR`` to the
workspace, ``/tests`` and ``/solution`` to where the verifier and the oracle mount them), in the
instruction and in every text file of the tree, tests and solution; the import report
(``harbor-import.json`` beside ``task.yaml``) lists every file changed. A task whose environment
cannot be reproduced here is still converted, and marked (``initial_state.environment
.unsupported``): ``task check`` then reports it as unsupported instead of failing obscurely.

Every task is validated before anything is written; a bundle is built in a temporary folder
beside its destination and renamed into place, and an existing destination is never replaced.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from assay.errors import InputError, NeverOverwrite
from assay.records.manifest import utc_now
from assay.suites.bundle import TASK_FILE, load_bundle, tree_digest
from assay.suites.errors import Problem, SuiteError
from assay.suites.harbor_plan import HarborPlan, plan_import, strip_canary

IMPORT_REPORT = "harbor-import.json"
HARBOR_REWARD_DIR = "/logs/verifier"
_SOLVE_WRAPPED = "solve.harbor.sh"

__all__ = ["IMPORT_REPORT", "HarborPlan", "Imported", "SandboxPaths", "import_harbor_tasks",
           "path_rewriter", "plan_import", "strip_canary", "write_bundle"]


@dataclass(frozen=True)
class SandboxPaths:
    """Where the sandbox puts what Harbor's container puts at ``WORKDIR``, ``/tests`` and
    ``/solution`` (given by the caller: they belong to layers above this one)."""

    work: str
    tests: str
    solution: str


@dataclass(frozen=True)
class Imported:
    """One bundle written: where, and whether its environment can run here."""

    task_id: str
    source: Path
    bundle: Path
    status: str  # "supported" | "unsupported"
    reasons: list[str]
    notes: list[str]


def path_rewriter(workdir: str | None, paths: SandboxPaths) -> tuple[re.Pattern[str],
                                                                       dict[str, str]]:
    """The one pattern (and its replacements) that moves Harbor's absolute paths onto the
    sandbox's; a path only matches as a whole path component (``/tests`` but not ``/testsuite``
    nor ``src/tests``)."""
    mapping = {"/tests": paths.tests, "/solution": paths.solution}
    if workdir and workdir != paths.work:
        mapping[workdir] = paths.work
    alts = "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True))
    return re.compile(rf"(?<![\w.$}}~/-])({alts})(?![\w.-])"), mapping


def _rewrite_file(path: Path, pattern: re.Pattern[str], mapping: dict[str, str]) -> int:
    data = path.read_bytes()
    if b"\0" in data:
        return 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    new, n = pattern.subn(lambda m: mapping[m.group(1)], text)
    if n:
        mode = path.stat().st_mode
        path.write_text(new, encoding="utf-8")
        os.chmod(path, mode)
    return n


def _rewrite_tree(root: Path, label: str, pattern: re.Pattern[str], mapping: dict[str, str],
                  rewrites: dict[str, int]) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            n = _rewrite_file(p, pattern, mapping)
            if n:
                rewrites[f"{label}/{p.relative_to(root).as_posix()}"] = n


def _starting_tree(plan: HarborPlan, repo: Path) -> None:
    """What the Dockerfile copies into its working directory, placed as Docker places it."""
    repo.mkdir()
    env = plan.environment
    for d in env.mkdirs:
        rel = env.relative(d)
        if rel:
            (repo / rel).mkdir(parents=True, exist_ok=True)
    for copy in env.copies:
        rel = env.relative(copy.dest)
        if rel is None:
            continue  # outside the working directory: already a reason it is unsupported
        target = repo / rel if rel else repo
        if copy.source.is_dir():
            shutil.copytree(copy.source, target, symlinks=True, dirs_exist_ok=True)
        elif copy.into_dir or not rel or target.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(copy.source, target / copy.source.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(copy.source, target)


def _solution(plan: HarborPlan, dest: Path, paths: SandboxPaths) -> None:
    """Harbor's solution folder, with ``solve.sh`` behind a wrapper: assay's oracle runs
    ``sh solve.sh``, Harbor runs it with bash and the task's ``[solution].env``."""
    src = plan.source / "solution"
    shutil.copytree(src, dest, symlinks=True)
    if not (dest / "solve.sh").is_file():
        return
    os.replace(dest / "solve.sh", dest / _SOLVE_WRAPPED)
    env = plan.config.solution.get("env") or {}
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in sorted(env.items()))
    (dest / "solve.sh").write_text(
        "#!/bin/sh\n# Written by assay task import-harbor: Harbor's solve.sh, run as Harbor "
        "runs it.\n" + exports
        + f"exec bash {shlex.quote(paths.solution + '/' + _SOLVE_WRAPPED)} \"$@\"\n")
    (dest / "solve.sh").chmod(0o755)


def _check_command(plan: HarborPlan, paths: SandboxPaths) -> str:
    env = plan.config.verifier.env
    prefix = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())) + " " \
        if env else ""
    return f'{prefix}bash "$ASSAY_TESTS/test.sh"'


def task_yaml(plan: HarborPlan, paths: SandboxPaths, digest: str, threshold: float) -> str:
    cfg = plan.config
    env: dict[str, Any] = {"requires": list(dict.fromkeys(plan.requires))}
    if plan.unsupported:
        env["unsupported"] = "; ".join(plan.unsupported[:3]) + (
            f" (and {len(plan.unsupported) - 3} more in {IMPORT_REPORT})"
            if len(plan.unsupported) > 3 else "")
    budget: dict[str, Any] = {"verifier_wall_seconds": cfg.verifier.timeout_sec}
    if cfg.agent.timeout_sec is not None:
        budget = {"agent_wall_seconds": cfg.agent.timeout_sec, **budget}
    spec = {
        "id": plan.task_id,
        "revision": 1,
        "split": "dev",
        "instruction": "instruction.md",
        "initial_state": {"repository": "repo", "repository_commit": None,
                          "fixture_digest": digest, "network_policy": "model-proxy-only",
                          "environment": env},
        "resources": {"cpu_cores": cfg.environment.cpus,
                      "memory_limit_mib": cfg.environment.memory_mib()},
        "budget": budget,
        "acceptance": {
            "verifier_revision": "v1",
            "required": ["behavior", "integrity"],
            "behavior": {"command": _check_command(plan, paths), "counts": "optional",
                         "tamper_evident": False,
                         "reward": {"dir": HARBOR_REWARD_DIR, "threshold": threshold}},
        },
    }
    head = (f"# Imported from the Harbor task {plan.source} by assay task import-harbor;\n"
            f"# what was carried over, approximated or left out: {IMPORT_REPORT}.\n")
    return head + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)


def _report(plan: HarborPlan, rewrites: dict[str, int], threshold: float) -> dict[str, Any]:
    cfg = plan.config
    return {
        "source": str(plan.source),
        "harbor_name": cfg.task.name if cfg.task else None,
        "harbor_schema_version": cfg.schema_version or cfg.version,
        "imported_at": utc_now(),
        "task_id": plan.task_id,
        "environment": {"status": plan.status, "reasons": plan.unsupported,
                        "base_image": plan.environment.base_image,
                        "workdir": plan.environment.workdir},
        "notes": plan.notes,
        "carried_over": {
            "agent.timeout_sec": ["budget.agent_wall_seconds", cfg.agent.timeout_sec],
            "verifier.timeout_sec": ["budget.verifier_wall_seconds", cfg.verifier.timeout_sec],
            "environment.cpus": ["resources.cpu_cores", cfg.environment.cpus],
            "environment.memory_mb": ["resources.memory_limit_mib",
                                      cfg.environment.memory_mib()],
            "tests/test.sh": ["acceptance.behavior", {"reward_dir": HARBOR_REWARD_DIR,
                                                      "threshold": threshold}],
        },
        "metadata": cfg.metadata,
        "path_rewrites": rewrites,
    }


def write_bundle(plan: HarborPlan, out: Path, paths: SandboxPaths, *,
                 threshold: float = 1.0) -> Imported:
    """Build the bundle beside ``out/<id>`` and rename it into place; an existing ``out/<id>``
    is refused (:class:`NeverOverwrite`), a half-built one is never left behind."""
    out.mkdir(parents=True, exist_ok=True)
    dest = out / plan.task_id
    if os.path.lexists(dest):
        raise NeverOverwrite(f"{dest} exists: an imported bundle is never overwritten; remove "
                             "it or import into another --out")
    tmp = Path(tempfile.mkdtemp(prefix=f".{plan.task_id}.", suffix=".importing", dir=out))
    try:
        pattern, mapping = path_rewriter(plan.environment.workdir, paths)
        rewrites: dict[str, int] = {}
        repo = tmp / "repo"
        _starting_tree(plan, repo)
        _rewrite_tree(repo, "repo", pattern, mapping, rewrites)
        shutil.copytree(plan.source / "tests", tmp / "tests", symlinks=True)
        _rewrite_tree(tmp / "tests", "tests", pattern, mapping, rewrites)
        if (plan.source / "solution").is_dir():
            _solution(plan, tmp / "solution", paths)
            _rewrite_tree(tmp / "solution", "solution", pattern, mapping, rewrites)
        text = strip_canary((plan.source / "instruction.md").read_text(encoding="utf-8"))
        new, n = pattern.subn(lambda m: mapping[m.group(1)], text)
        if n:
            rewrites["instruction.md"] = n
        (tmp / "instruction.md").write_text(new, encoding="utf-8")
        (tmp / TASK_FILE).write_text(task_yaml(plan, paths, tree_digest(repo), threshold),
                                     encoding="utf-8")
        (tmp / IMPORT_REPORT).write_text(
            json.dumps(_report(plan, rewrites, threshold), indent=2, ensure_ascii=False)
            + "\n", encoding="utf-8")
        load_bundle(tmp)  # what was written must load, or nothing is kept
        tmp.chmod(0o755)
        if os.path.lexists(dest):
            raise NeverOverwrite(f"{dest} appeared while it was being imported")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Imported(plan.task_id, plan.source, dest, plan.status, plan.unsupported, plan.notes)


def import_harbor_tasks(task_dirs: list[Path], out: Path, paths: SandboxPaths, *,
                        threshold: float = 1.0) -> list[Imported]:
    """Validate every folder first (all problems in one :class:`SuiteError`, and an id that two
    folders share, or that exists under ``out``, refused), then write every bundle."""
    if not math.isfinite(threshold):
        raise InputError(f"reward threshold {threshold}: must be a finite number")
    problems: list[Problem] = []
    plans: list[HarborPlan] = []
    for d in task_dirs:
        try:
            plans.append(plan_import(Path(d)))
        except SuiteError as exc:
            problems += exc.problems
    seen: dict[str, Path] = {}
    for p in plans:
        if p.task_id in seen:
            problems.append(Problem(p.source / "task.toml", None, "task.name",
                                    f"task id {p.task_id!r} is also {seen[p.task_id]}'s"))
        seen[p.task_id] = p.source
    if problems:
        raise SuiteError(problems)
    taken = [str(out / p.task_id) for p in plans if os.path.lexists(out / p.task_id)]
    if taken:
        raise NeverOverwrite(f"{', '.join(taken)} exists: an imported bundle is never "
                             "overwritten; remove it or import into another --out")
    return [write_bundle(p, out, paths, threshold=threshold) for p in plans]
