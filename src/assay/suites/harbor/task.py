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
import posixpath
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
from assay.suites.harbor.docker import carried_dockerfile
from assay.suites.harbor.plan import (
    HarborPlan,
    ImageSource,
    ImportStatus,
    plan_import,
    strip_canary,
)
from assay.suites.harbor.reward import AGGREGATES, REDUCER, REDUCER_SOURCE, reducer_command
from assay.suites.image_ref import parse_reference
from assay.suites.limits import DOCKERFILE_MAX_BYTES
from assay.suites.textfile import read_text

IMPORT_REPORT = "harbor-import.json"
HARBOR_REWARD_DIR = "/logs/verifier"
_SOLVE_WRAPPED = "solve.harbor.sh"
#: Where the bundle keeps the task's image source: Harbor's ``environment/`` folder (the build
#: context) with its Dockerfile carried over (``assay env build`` builds it on its base).
DOCKERFILE = "environment/Dockerfile"

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
    status: ImportStatus
    reasons: list[str]
    notes: list[str]
    #: the image it will run in: a registry reference, or the bundle's Dockerfile; None: none
    image: str | None = None
    #: ``pulled`` (a registry image as it is) or ``on_base`` (the Dockerfile built on its
    #: ``FROM`` image, pulled); None: no image
    image_source: ImageSource | None = None
    #: the image an ``on_base`` Dockerfile builds on, its registry spelled out
    base: str | None = None
    #: ``on_base`` only: the Debian translation stands in where ``base`` cannot be pulled
    approximate_base: bool = False

    @property
    def image_text(self) -> str:
        """Which image the task runs in and how it is made, in one line (the import's
        table): ``pulled: REF``, ``on_base: FROM REF`` (``, approximated where it cannot be
        pulled``), or ``none``."""
        if self.image_source == "pulled":
            return f"pulled: {self.image}"
        if self.image_source == "on_base":
            return (f"on_base: {self.image} FROM {self.base}"
                    + (", approximated where it cannot be pulled" if self.approximate_base
                       else ""))
        return "none"


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
    for copy in env.copies:  # a folder copied to an ancestor of the working directory
        if env.workdir and copy.source.is_dir() and env.relative(copy.dest) is None:
            rel = posixpath.relpath(env.workdir, posixpath.normpath(copy.dest))
            sub = copy.source / rel
            if not rel.startswith("..") and sub.is_dir() and sub.resolve().is_relative_to(
                    copy.source.resolve()):
                shutil.copytree(sub, repo, symlinks=True, dirs_exist_ok=True)
    for dest, body, mode in env.written:  # COPY <<EOF heredocs
        rel = env.relative(dest)
        if rel:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(body, encoding="utf-8")
            if mode is not None:
                (repo / rel).chmod(int(mode, 8))


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


def _check_command(plan: HarborPlan, paths: SandboxPaths, threshold: float) -> str:
    env = plan.config.verifier.env
    prefix = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())) + " " \
        if env else ""
    command = f'{prefix}bash "$ASSAY_TESTS/test.sh"'
    if plan.reduces_reward:
        command += "; " + reducer_command(plan.reward_key, plan.reward_aggregate,
                                          HARBOR_REWARD_DIR, threshold)
    return command


def _environment(plan: HarborPlan, dest: Path, paths: SandboxPaths,
                 rewrites: dict[str, int]) -> None:
    """The image's source in the bundle: Harbor's ``environment/`` as the build context, its
    Dockerfile carried over (:func:`carried_dockerfile`)."""
    shutil.copytree(plan.source / "environment", dest, symlinks=True)
    path = dest / "Dockerfile"
    original = read_text(plan.source / "environment" / "Dockerfile",
                         limit=DOCKERFILE_MAX_BYTES, what="the Dockerfile")[1]
    text, n = carried_dockerfile(original, plan.environment, paths.work, plan.additions)
    if n:
        rewrites[DOCKERFILE] = n
    path.unlink()  # a link in Harbor's folder is replaced, never written through
    path.write_text(text, encoding="utf-8")


def task_yaml(plan: HarborPlan, paths: SandboxPaths, digest: str, threshold: float) -> str:
    cfg = plan.config
    env: dict[str, Any] = {"requires": list(dict.fromkeys(plan.requires))}
    pin: dict[str, Any] = {}
    if plan.image_ref is not None:
        env["image"] = plan.image_ref
        if parse_reference(plan.image_ref).digest is not None:
            pin["environment_image"] = plan.image_ref
    elif plan.recipe is not None:
        env["image"] = DOCKERFILE
        if plan.approximate_base:
            env["approximate_base"] = True
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
                          "environment": env, **pin},
        "resources": {"cpu_cores": cfg.environment.cpus,
                      "memory_limit_mib": cfg.environment.memory_mib()},
        "budget": budget,
        "acceptance": {
            "verifier_revision": "v1",
            "required": ["behavior", "integrity"],
            "behavior": {"command": _check_command(plan, paths, threshold), "counts": "optional",
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
                        "workdir": plan.environment.workdir,
                        "image": plan.image_ref or (DOCKERFILE if plan.recipe is not None
                                                    else None),
                        # pulled: the registry image as it is; on_base: the Dockerfile built
                        # on base_ref, pulled (approximate_base: the Debian translation
                        # where it cannot be)
                        "image_source": plan.image_source,
                        "base_ref": plan.environment.base_ref if plan.recipe is not None
                        else None,
                        "approximate_base": plan.approximate_base and plan.recipe is not None,
                        "substitutions": list(plan.recipe.substitutions)
                        if plan.recipe is not None else []},
        "test_script": "as written, the CTRF plugin named" if plan.test_sh_named_plugin
        else "installers moved into the image" if plan.test_sh is not None else "as written",
        "reward": {"file": plan.reward.file, "multi_metric": plan.reward.multi_metric,
                   "keys_seen": plan.reward.keys, "key": plan.reward_key,
                   "aggregate": plan.reward_aggregate},
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
        if plan.test_sh is not None:
            mode = (tmp / "tests" / "test.sh").stat().st_mode
            (tmp / "tests" / "test.sh").unlink()
            (tmp / "tests" / "test.sh").write_text(plan.test_sh, encoding="utf-8")
            os.chmod(tmp / "tests" / "test.sh", mode)
        _rewrite_tree(tmp / "tests", "tests", pattern, mapping, rewrites)
        if plan.reduces_reward:
            if os.path.lexists(tmp / "tests" / REDUCER):
                raise SuiteError.one(plan.source / "tests" / REDUCER, "a file of assay's own "
                                     "name: rename it")
            (tmp / "tests" / REDUCER).write_text(REDUCER_SOURCE, encoding="utf-8")
        if plan.recipe is not None:
            _environment(plan, tmp / "environment", paths, rewrites)
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
    on_base = plan.image_ref is None and plan.recipe is not None
    return Imported(plan.task_id, plan.source, dest, plan.status, plan.unsupported, plan.notes,
                    plan.image_ref or (DOCKERFILE if on_base else None), plan.image_source,
                    plan.environment.base_ref if on_base else None,
                    plan.approximate_base and on_base)


def import_harbor_tasks(task_dirs: list[Path], out: Path, paths: SandboxPaths, *,
                        threshold: float = 1.0, reward_key: str | None = None,
                        reward_aggregate: str | None = None,
                        approximate_base: bool = False) -> list[Imported]:
    """Validate every folder first (all problems in one :class:`SuiteError`, and an id that two
    folders share, or that exists under ``out``, refused), then write every bundle.
    ``reward_key``/``reward_aggregate``: how a multi-metric ``reward.json`` becomes one reward
    (:mod:`assay.suites.harbor.reward`); a task that writes one with neither is refused.
    ``approximate_base``: a Dockerfile's bundle says ``environment.approximate_base: true``."""
    if not math.isfinite(threshold):
        raise InputError(f"reward threshold {threshold}: must be a finite number")
    if reward_key is not None and reward_aggregate is not None:
        raise InputError("--reward-key and --reward-aggregate: give one, not both")
    if reward_aggregate is not None and reward_aggregate not in AGGREGATES:
        raise InputError(f"--reward-aggregate {reward_aggregate}: one of "
                         f"{', '.join(AGGREGATES)}")
    if reward_key is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}",
                                                   reward_key):
        raise InputError(f"--reward-key {reward_key!r}: a reward.json key (letters, digits, "
                         "_ . -)")
    problems: list[Problem] = []
    plans: list[HarborPlan] = []
    for d in task_dirs:
        try:
            plans.append(plan_import(Path(d), reward_key=reward_key,
                                     reward_aggregate=reward_aggregate,
                                     approximate_base=approximate_base))
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
