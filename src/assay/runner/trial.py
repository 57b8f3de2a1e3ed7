"""One trial, end to end: prepare, run the agent, freeze, verify.

Each stage is timed and recorded in ``trial.json`` (rewritten atomically after every stage, so
a crash leaves the record of how far it got). The live workspace and the agent's HOME live in a
temporary directory (in the hooks' ``scratch_dir`` when given) that is deleted after the
freeze: nothing downstream can read anything but the frozen artifact.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.agents import Agent, AgentContext, AgentRun
from assay.environments.run import (
    ensure_image,
    host_loader,
    host_node,
    host_python,
    image_record,
    image_root,
)
from assay.environments.seed import seed_from_image
from assay.errors import NeverOverwrite, TrialRefused
from assay.grading.verify.verifier import verify
from assay.records.artifact import freeze, refuse
from assay.records.failures import AGENT_START_FAILED, INFRA_CODES, start_failure, stderr_tail
from assay.records.fork import ForkStart
from assay.records.io import atomic_write_json, atomic_write_text
from assay.records.manifest import tool_identity, utc_now
from assay.records.statuses import TrialRunStatus
from assay.records.trial import (
    INSTRUCTION_FILE,
    TRIAL_JSON,
    Grade,
    GradeSummary,
    Stage,
    StageName,
    TaskIdentity,
    TrialRecord,
    as_written,
    read_trial,
)
from assay.records.workspace import WorkspaceOverLimit, remove_tree
from assay.runner.workspace_git import make_repository
from assay.sandbox import KILL_GRACE_SECONDS, Limits, run_sandboxed
from assay.suites.bundle import Bundle, check_starting_tree, tree_digest
from assay.suites.patterns import glob_match

# One sandbox call checks every requirement: an executable on PATH, else a Python module.
_REQUIRE_SCRIPT = r"""
for r in "$@"; do
  if command -v "$r" >/dev/null 2>&1; then
    v=$("$r" --version 2>&1 | head -n 1)
    printf '%s\texecutable\t%s\n' "$r" "$v"
  elif python3 -c "import $r" >/dev/null 2>&1; then
    v=$(python3 -c "import $r; print(getattr($r, '__version__', 'unknown'))" 2>&1)
    printf '%s\tpython_module\t%s\n' "$r" "$v"
  else
    printf '%s\tmissing\t\n' "$r"
  fi
done
"""


@dataclass
class TrialResult:
    trial_dir: Path
    status: TrialRunStatus
    grade: Grade | None
    record: TrialRecord | None
    """None only when a remote attempt came back without one (its worker was lost)."""
    error: str | None = None
    """Why the trial could not be run (the record's ``error``, or the executor's)."""


_ENV_CACHE: dict[tuple[str, ...], dict[str, Any]] = {}


def image_for_record(bundle: Bundle) -> dict[str, Any] | None:
    """The trial record's ``environment_image``: the pinned image (digest, source,
    substitutions) and the host tools lent to it (the verifier's pytest, the agent CLIs'
    node), or None for a task on the host's system. Refuses what :func:`ensure_image`
    refuses."""
    image = ensure_image(bundle)
    if image is None:
        return None
    return {**image_record(image),
            # False: the bundle names a source but no digest; this is what it built into
            "pinned": bundle.spec.initial_state.environment_image is not None,
            "host_tools": {"pytest": host_python() or None, "loader": host_loader() or None,
                           "node": host_node() or None}}


_ENV_LOCK = threading.Lock()


def check_environment(bundle: Bundle, workspace: Path) -> dict[str, Any]:
    """Requirements checked inside the same sandbox the agent and verifier get; versions kept.

    What the sandbox offers is the machine's, not the workspace's, so a found set is kept for
    the life of the process (an experiment checks it once per set of requirements, not once per
    trial: it costs two interpreter starts); a missing one is asked again every time."""
    unsupported = bundle.spec.initial_state.environment.unsupported
    if unsupported is not None:
        raise TrialRefused(f"unsupported environment: {unsupported}")
    image = ensure_image(bundle)
    root = image_root(image) if image is not None else None
    reqs = bundle.spec.initial_state.environment.requires
    if not reqs:
        return {}
    key = (root.digest if root is not None else "host", *sorted(reqs))
    with _ENV_LOCK:
        if key in _ENV_CACHE:
            return {k: dict(v) for k, v in _ENV_CACHE[key].items()}
    bad = [r for r in reqs if not r.replace("-", "_").replace(".", "_").isidentifier()]
    if bad:
        raise TrialRefused(f"environment.requires: not a command or module name: {bad}")
    res = run_sandboxed(["sh", "-c", _REQUIRE_SCRIPT, "check", *reqs], workspace,
                        limits=Limits(wall_seconds=60, memory_mib=512, pids=64), image=root)
    found: dict[str, Any] = {}
    for line in res.stdout_tail.splitlines():
        name, kind, version = (line.split("\t") + ["", ""])[:3]
        found[name] = {"kind": kind, "version": version.strip() or None}
    missing = [r for r in reqs if found.get(r, {}).get("kind") in (None, "missing")]
    if missing:
        raise TrialRefused(f"missing in the sandbox: {', '.join(missing)}")
    with _ENV_LOCK:
        _ENV_CACHE[key] = {k: dict(v) for k, v in found.items()}
    return found


class _Stages:
    def __init__(self, trial_dir: Path, record: TrialRecord) -> None:
        self.trial_dir = trial_dir
        self.record = record

    def save(self) -> None:
        atomic_write_json(self.trial_dir / TRIAL_JSON, as_written(self.record))

    def run(self, name: StageName, fn: Any, queued_seconds: float | None = None) -> Any:
        stage = Stage(name=name, started_at=utc_now(), status="running")
        if queued_seconds is not None:
            stage.queued_seconds = queued_seconds
        self.record.stages.append(stage)
        self.save()
        t0 = time.perf_counter()
        try:
            result = fn()
            stage.status = "ok"
            return result
        except BaseException as exc:
            stage.status = "failed"
            stage.detail = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            stage.seconds = round(time.perf_counter() - t0, 3)
            self.save()


class TrialHooks:
    """What a runner around a trial adds without owning its stages (the experiment runner: its
    state transitions, the gateway's variables, the budget read back). The defaults do
    nothing, which is ``assay trial run``."""

    def __init__(self) -> None:
        #: gateway variables for the agent, and the network path to the gateway
        self.model_env: dict[str, str] = {}
        self.proxy: Any = None
        self.grace_seconds: float = KILL_GRACE_SECONDS
        self.verifier_revision: str | None = None
        #: a fork experiment's restore of the shared state: given the fresh workspace and HOME,
        #: replaces them with the frozen state and returns its record (``trial.json``'s
        #: ``fork``); it may add to ``model_env``. Raises TrialRefused when there is no state.
        self.start_state: Callable[[Path, Path], ForkStart] | None = None
        #: the arm's own files, bound read-only at /assay/agent (``agent_files``)
        self.agent_files: Path | None = None
        #: where the live workspace and HOME are made (a fresh folder inside it); None: the
        #: system's temporary directory. The experiment runner gives one under the run
        #: directory, so a killed runner's leftovers are found and removed by the next start
        #: (``runner/scratch.py``).
        self.scratch_dir: Path | None = None

    def before(self, stage: str) -> None:
        """Called before each stage starts (``agent``, ``freeze``, ``verify``); the experiment
        runner commits its state transition here, before the action it announces."""

    def after_agent(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The agent's execution record once it ended; may add to it or change its status
        (budget exhausted, upstream unreachable)."""
        return execution

    def verify_gate(self) -> contextlib.AbstractContextManager[None]:
        """Entered after ``before("verify")`` and held through the verify stage: the experiment
        runner frees the attempt's agent slot here and waits for a verification slot
        (``runner/slots.py``). The time spent entering it is the stage's ``queued_seconds``."""
        return contextlib.nullcontext()


def _classify_start(start_digest: str | None, execution: dict[str, Any], ctx: AgentContext,
                    hooks: TrialHooks, workspace: Path, *, solution: bool = False) -> None:
    """An agent that exited without ever getting going is ``agent_start_failed``
    (``records/failures.py``), not a trial of the agent: its execution record says so, with
    the tail of its stderr. The task's own solution (``solution``: the oracle) failing early
    on a missing file is the task's failure, which ``task check`` calls broken, unless it
    could not be run at all (126, 127)."""
    if execution.get("status") != "exited_nonzero" or execution.get("failure_code"):
        return
    if solution and execution.get("exit_code") not in (126, 127):
        return
    tail = stderr_tail(ctx.record_dir)
    # None: no model, or no gateway that counted its calls (then only the plain signs count)
    calls = (execution.get("model_usage") or {}).get("calls") if hooks.model_env else None
    unchanged = hooks.start_state is None and start_digest == tree_digest(workspace)
    why = start_failure(execution, tail, model_calls=calls, unchanged=unchanged)
    if why is not None:
        execution.update(status="infra_error", failure_code=AGENT_START_FAILED, detail=why,
                         stderr_tail=tail[-1000:])


def run_trial(bundle: Bundle, agent: Agent, trial_dir: Path, *, rep: int = 0,
              attempt: int = 0, hooks: TrialHooks | None = None,
              trial_id: str | None = None) -> TrialResult:
    hooks = hooks or TrialHooks()
    if (trial_dir / TRIAL_JSON).exists():
        raise NeverOverwrite(f"{trial_dir} already holds a trial: a trial is never overwritten")
    trial_dir.mkdir(parents=True, exist_ok=True)
    trial_id = trial_id or f"{bundle.id}/{agent.name}/{rep}"
    spec = bundle.spec
    proxied = hooks.proxy is not None
    record = TrialRecord(
        schema=TrialRecord.schema_id(), trial_id=trial_id, attempt=attempt,
        task=TaskIdentity(id=spec.id, revision=spec.revision, family=spec.family,
                          split=spec.split, path=str(bundle.root.resolve()),
                          spec_sha256=bundle.spec_sha256,
                          fixture_digest_pinned=spec.initial_state.fixture_digest),
        agent=agent.name, rep=rep, assay=tool_identity(),
        network_policy={"requested": spec.initial_state.network_policy,
                        "applied": "model-proxy" if proxied else "none",
                        **({"note": "no model gateway for this trial: the agent gets no "
                                    "network"}
                           if spec.initial_state.network_policy != "none" and not proxied
                           else {})},
        budget=spec.budget.model_dump(), resources=spec.resources.model_dump(),
        # Asked for but not enforced; the sandbox's own record (execution.limits_applied)
        # says which limits were in force and how. Filled in as the stages learn it.
        not_enforced={
            **({"budget.assistant_steps": f"{agent.name} reports no steps to count"}
               if spec.budget.assistant_steps is not None and not hooks.model_env else {}),
        },
        started_at=utc_now(), ended_at=None, status="running", stages=[],
        execution=None,
    )
    describe = getattr(agent, "describe", None)
    if callable(describe):  # an adapter's configuration (CLI digest, flags, config digest)
        record.agent_identity = describe()
    stages = _Stages(trial_dir, record)
    stages.save()
    if hooks.scratch_dir is not None:
        hooks.scratch_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="assay-trial-", dir=hooks.scratch_dir) as tmp:
        workspace = Path(tmp) / "workspace"
        home = Path(tmp) / "home"
        try:
            # the tree the agent starts from: the pinned one, or with what the image added
            start_digest: list[str | None] = [None]

            def prepare() -> None:
                bundle.export_starting_tree(workspace)
                home.mkdir()
                check = check_starting_tree(bundle, workspace)
                record.task.fixture_digest = start_digest[0] = check.digest
                if check.problem:
                    raise TrialRefused(check.problem)
                image = image_for_record(bundle)
                if image is not None:  # a task on the host's system: its record as before
                    seeded = seed_from_image(bundle, workspace)
                    if seeded.paths:  # what the image's build left where the workspace is
                        image["workdir_seeded"] = {"files": len(seeded.paths),
                                                   "bytes": seeded.bytes,
                                                   "first": seeded.paths[:20]}
                        start_digest[0] = tree_digest(workspace)
                    record.environment_image = image
                record.environment = check_environment(bundle, workspace)
                if bundle.spec.initial_state.git:  # one commit, before the agent starts
                    git_home = Path(tmp) / "git-home"
                    git_home.mkdir()
                    record.workspace_git = make_repository(workspace, git_home)
                    start_digest[0] = tree_digest(workspace)
                if hooks.start_state is not None:
                    record.fork = hooks.start_state(workspace, home)

            stages.run("prepare", prepare)
            # the text the agent is told, recorded with the trial before the agent starts
            instruction = trial_dir / INSTRUCTION_FILE
            atomic_write_text(instruction, bundle.agent_instruction())
            ctx = AgentContext(bundle, workspace, home, trial_dir / "agent",
                               model_env=dict(hooks.model_env), proxy=hooks.proxy,
                               grace_seconds=hooks.grace_seconds,
                               agent_files=hooks.agent_files, instruction_file=instruction)
            hooks.before("agent")
            run: AgentRun = stages.run("agent", lambda: agent.run(ctx))
            execution = hooks.after_agent(run.to_record())
            reconcile = getattr(agent, "reconcile", None)
            if callable(reconcile):  # the agent's own claims beside the gateway's figures
                execution = reconcile(execution)
            record.execution = execution  # kept in the record should anything below raise
            cpu = run.limits_applied.get("cpu_cores") or {}
            if cpu.get("mechanism", "not_applied") == "not_applied":
                record.not_enforced["resources.cpu_cores"] = cpu.get(
                    "reason", "the agent ran without a CPU quota")
            _classify_start(start_digest[0], execution, ctx, hooks, workspace,
                            solution=agent.name == "oracle")
            record.execution = execution  # the record holds a copy: now with the class
            code = execution.get("failure_code")
            if code in INFRA_CODES:  # never started, or its model never answered
                record.failure_code = code
                raise TrialRefused(f"{code}: {execution.get('detail')}")
            if execution["status"] == "infra_error":
                raise TrialRefused("the agent could not be run: "
                                   f"{execution.get('detail') or run.detail}")
            hooks.before("freeze")
            stages.run("freeze", lambda: _freeze(bundle, workspace, trial_dir, record,
                                                 stages.save))
        except TrialRefused as exc:
            return _infra_error(record, stages, str(exc))
        except Exception as exc:  # noqa: BLE001 - a trial must end in a record, not a traceback
            return _infra_error(record, stages, f"{type(exc).__name__}: {exc}")
        finally:
            remove_tree(workspace)  # however deep or unreadable the agent left it
            remove_tree(home)
    revision = hooks.verifier_revision or spec.acceptance.verifier_revision
    hooks.before("verify")
    queued = time.perf_counter()
    with hooks.verify_gate():
        grade = stages.run("verify", lambda: verify(
            bundle, trial_dir, revision=revision, trial_id=trial_id,
            execution=record.execution or {}),
            queued_seconds=round(time.perf_counter() - queued, 3))
    record.status, record.ended_at = "graded", utc_now()
    record.grade = GradeSummary(revision=revision, accepted=grade.accepted,
                                failure_code=grade.failure_code)
    stages.save()
    return TrialResult(trial_dir, "graded", grade, record)


def _infra_error(record: TrialRecord, stages: _Stages, error: str) -> TrialResult:
    """The trial could not be run: its record says why, and ends."""
    record.status, record.error, record.ended_at = "infra_error", error, utc_now()
    stages.save()
    return TrialResult(stages.trial_dir, "infra_error", None, record, error)


def _freeze(bundle: Bundle, workspace: Path, trial_dir: Path, record: TrialRecord,
            save: Callable[[], None]) -> dict[str, Any]:
    """Freeze within the task's workspace bounds. Over them, no tar is written: the
    ``artifact.json`` holds the figure and the execution becomes ``resource_limit``, saved in
    ``trial.json`` before ``artifact.json`` exists (a runner that restarts verifies a frozen
    attempt from the execution it finds there)."""
    limits = bundle.workspace_limits()
    execution = record.execution
    assert execution is not None  # the agent stage ran
    applied = execution.setdefault("limits_applied", {})
    note = ("measured when the workspace is frozen (apparent sizes; folders and links count "
            "as files); over it no artifact is written")
    applied["workspace_mib"] = {"value": bundle.spec.resources.workspace_mib,
                                "mechanism": "freeze", "note": note}
    applied["workspace_files"] = {"value": bundle.spec.resources.workspace_files,
                                  "mechanism": "freeze", "note": note}
    try:
        return freeze(workspace, trial_dir, limits=limits, ignored=bundle.ignored_paths,
                      match=glob_match)
    except WorkspaceOverLimit as over:
        execution.update(status="resource_limit", reason="workspace_limit",
                         detail=str(over), workspace_limit=over.figure,
                         status_before_freeze=execution.get("status"))
        save()
        return refuse(trial_dir, over, limits)


def regrade(trial_dir: Path, bundle: Bundle, revision: str) -> Grade:
    """Grade the same frozen artifact again into a new grade file beside the old ones."""
    record = read_trial(trial_dir)
    if record.status != "graded" and not (trial_dir / "artifact.json").exists():
        raise TrialRefused(f"{trial_dir}: the trial has no frozen artifact to grade")
    # An edited task.yaml is allowed (that is what a new verifier revision is for); the grade
    # records which spec it used.
    return verify(bundle, trial_dir, revision=revision, trial_id=record.trial_id,
                  execution=record.execution or {})
