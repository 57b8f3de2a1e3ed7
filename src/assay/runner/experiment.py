"""``assay exp run``: every (task, arm, repetition) of an experiment, surviving crashes.

The experiment file, the task fingerprints and the arms' identities are frozen into
``manifest.json`` and the state database before the first trial; resuming is the same command,
and a changed file is refused. Every attempt owns a directory that is never reused and talks to
the model only through the run's gateway with a token of its own. State transitions are
committed before the action they announce (``runner/state.py``), so after a ``kill -9`` an
attempt found preparing or running is closed as interrupted and run anew, while an attempt
whose artifact is frozen is only verified again, never run again.

The failure taxonomy of DESIGN.md: an attempt that failed before the agent started (sandbox,
environment check) or whose every model call found the upstream unreachable is an
``infra_error`` and retried with a new attempt, up to ``retries.infra``; a timeout, an exhausted
budget or a resource limit is the trial's result; a grader error is graded again from the same
artifact. At ``limits.total_cost_usd`` no new attempt starts, and the run stops resumable.

Where an attempt's stages run is the executor's business (``runner/executors/local.py``: this
process, or a Ray task on a cluster node with ``--executor ray``); what its result means, and
every state transition, stays here.

Each arm's model is reached over its ``model.protocol`` (chat, responses or anthropic) through
the gateway; a ``builtin/replay`` arm's upstream is the run's replay server, one script per
task.

The module runs past 400 lines because one run's order of events (manifest, recovery, gateway
and replay server, scheduling, the attempt, re-verification) shares the same state transitions
and reads best in one place; the parts with a life of their own are beside it (``state.py``,
``fork.py``, ``holdout.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.agents import parse_agent
from assay.errors import InputError, NeverOverwrite, RunConflict, SuiteError, TrialRefused
from assay.grading.verify.verifier import grade_path, verify
from assay.models.client import redact_url
from assay.models.gateway.budget import Limits as BudgetLimits
from assay.models.gateway.service import Gateway, Secret, ServerLimits, Upstream
from assay.models.gateway.wire import Family
from assay.models.replay_script import REPLAY_MODEL, ReplayBook, load_replay
from assay.models.replay_server import ReplayServer, serve_replay
from assay.records.artifact import ARTIFACT_JSON
from assay.records.experiment import ExperimentManifest
from assay.records.failures import (
    AGENT_START_FAILED,
    MODEL_UNAVAILABLE,
    infra_code,
    model_unavailable,
)
from assay.records.io import atomic_write_json, read_json_file
from assay.records.layout import interrupted_start
from assay.records.ledger import ledger_totals
from assay.records.manifest import tool_identity, utc_now
from assay.records.statuses import AttemptState, ExperimentStatus, TrialState
from assay.records.trial import Grade, read_grade, read_trial
from assay.report.atif import write_beside
from assay.runner.agent_files import agent_spec_for, stage_agent_files
from assay.runner.arm_check import check_arms
from assay.runner.executors.base import WORKER_LOST, Executor, TrialJob
from assay.runner.executors.local import make_executor
from assay.runner.fork import ForkPrefixes, check_fork, fork_manifest, fork_totals
from assay.runner.gateway_channel import attempt_channel
from assay.runner.holdout import MANIFEST_KEY as HOLDOUT_KEY
from assay.runner.holdout import holdout_gate
from assay.runner.progress import NullProgress, Progress, TrialDone
from assay.runner.scratch import SCRATCH, attempt_scratch, remove_scratch, session_tempdir
from assay.runner.sequential import SequentialLooks, sequential_manifest
from assay.runner.slots import AttemptSlots, Ticket, usable_cores
from assay.runner.state import Attempt, StateDB
from assay.runner.trial import TrialHooks, TrialResult
from assay.sandbox import ProxyTarget, sweep_orphans_once, sweep_stale_images_once
from assay.suites.experiment import (
    Experiment,
    TrialKey,
    bar_sha256,
    check_plan_size,
    identity_sha256,
    load_experiment,
    plan,
)

MANIFEST = "manifest.json"
EXPERIMENT_COPY = "experiment.yaml"
MANIFEST_SCHEMA = "assay.experiment.manifest/1"
DEFAULT_GRACE_SECONDS = 10.0
#: an arm whose first this-many attempts all fail to start its agent stops the run (exit 2)
START_FAILURES_TO_STOP = 3


#: what a display of an experiment is (``runner/progress.py``): told each trial as it ends
ExperimentProgress = Progress[TrialDone]


@dataclass
class ExperimentResult:
    out_dir: Path
    status: ExperimentStatus
    #: trials by state in ``state.sqlite``
    counts: dict[TrialState, int]
    spent_usd: float
    spent_complete: bool
    message: str | None = None
    reverified: int = 0
    interrupted: int = 0
    #: a fork experiment's prefixes: attempts on disk, calls, cost (apart from the arms')
    fork: dict[str, Any] | None = None
    #: models the arms (or the fork's prefix) call that have no entry in ``prices``: their
    #: cost is unknown, and ``spent_usd`` covers the priced calls only
    unpriced_models: list[str] = field(default_factory=list)
    #: attempts whose directory is gone (relative paths): their evidence is lost, and the run
    #: is not complete whatever its trials' rows say
    evidence_gaps: list[str] = field(default_factory=list)


@dataclass
class _ArmAccess:
    """How one arm's agents reach their model; the key never leaves this object."""

    model: str | None
    upstream: Upstream | None
    base_url_shown: str | None
    params: dict[str, Any] = field(default_factory=dict)
    protocol: Family = "chat"
    # builtin/replay: the scripts, served by the run's replay server (upstream is then None)
    replay: ReplayBook | None = None


def _arm_access(exp: Experiment) -> dict[str, _ArmAccess]:
    out: dict[str, _ArmAccess] = {}
    problems: list[str] = []
    for name, arm in exp.spec.arms.items():
        try:
            parse_agent(arm.agent)
        except ValueError as exc:
            problems.append(f"arms.{name}.agent: {exc}")
        if arm.model is None:
            out[name] = _ArmAccess(None, None, None, dict(arm.params))
            continue
        if arm.model.name == REPLAY_MODEL:
            try:
                book = load_replay(exp.path.parent / (arm.model.script or ""), exp.bundles)
            except SuiteError as exc:
                problems.append(f"arms.{name}.model.script: {exc}")
                continue
            out[name] = _ArmAccess(arm.model.name, None, "builtin/replay (local)",
                                   dict(arm.params), arm.model.protocol, book)
            continue
        env = arm.model.base_url_env or "MODEL_BASE_URL"
        base = os.environ.get(env)
        if not base:
            problems.append(f"arms.{name}.model: the environment variable {env} (base URL of "
                            "the upstream) is not set")
            continue
        key = os.environ.get(arm.model.api_key_env or "MODEL_API_KEY", "")
        out[name] = _ArmAccess(arm.model.name, Upstream(base.rstrip("/"), Secret(key)),
                               redact_url(base), dict(arm.params), arm.model.protocol)
    if problems:
        raise InputError(f"{exp.path}: " + "; ".join(problems))
    return out


def _manifest(exp: Experiment, access: dict[str, _ArmAccess], jobs: int,
              grace: float) -> dict[str, Any]:
    spec = exp.spec
    return {
        "schema": MANIFEST_SCHEMA, "kind": "experiment", "name": spec.name,
        "experiment_file": str(exp.path.resolve()), "identity": exp.identity,
        "identity_sha256": identity_sha256(exp.identity), "assay": tool_identity(),
        "created_at": utc_now(),
        "arms": {n: {"agent": a.agent, "model": a.model.name if a.model else None,
                     "protocol": a.model.protocol if a.model else None,
                     "base_url": access[n].base_url_shown, "params": a.params,
                     **_agent_identity(a.agent), **_replay_identity(access[n])}
                 for n, a in spec.arms.items()},
        "limits": spec.limits.model_dump(), "prices": {k: v.model_dump()
                                                       for k, v in spec.prices.items()},
        "retries": spec.retries.model_dump(), "repetitions": spec.repetitions,
        "seed": spec.seed, "concurrency": jobs, "watchdog_grace_seconds": grace,
        "bar": exp.identity["settings"].get("bar"),
        "bar_sha256": bar_sha256(exp.identity["settings"].get("bar")),
        "task_meta": {tid: {"family": b.spec.family, "split": b.spec.split}
                      for tid, b in exp.bundles.items()},
        **_environments(exp),
        "sessions": [],
        **({"fork": fork_manifest(spec.fork)} if spec.fork is not None else {}),
        **({"sequential": seq} if (seq := sequential_manifest(exp)) is not None else {}),
    }


def _environments(exp: Experiment) -> dict[str, Any]:
    """``environments``: each image-pinned task's image (digest, source, substitutions), as
    the store has it when the run starts; absent when no task names an image (older runs)."""
    from assay.environments.run import ensure_image, image_record

    found: dict[str, Any] = {}
    for tid, bundle in exp.bundles.items():
        if bundle.spec.initial_state.environment.image is None:
            continue
        try:
            image = ensure_image(bundle)
        except TrialRefused as exc:  # each of its trials is refused with the same reason
            found[tid] = {"digest": bundle.spec.initial_state.environment_image,
                          "unavailable": str(exc)}
            continue
        found[tid] = image_record(image) if image is not None else None
    return {"environments": found} if found else {}


def _state_identity(exp: Experiment) -> dict[str, Any]:
    """The identity frozen in state.sqlite: the experiment's, plus what adapters that describe
    themselves say (their CLI's digest, flags), so a resume with another CLI build is refused
    like any other change. Arms without such an adapter add nothing, so older runs resume."""
    agents = {name: ident["agent_identity"] for name, arm in sorted(exp.spec.arms.items())
              if (ident := _agent_identity(arm.agent))}
    return {**exp.identity, "agent_identities": agents} if agents else exp.identity


def _agent_identity(spec: str) -> dict[str, Any]:
    """An adapter's own description (CLI digest, flags, config template), when it has one."""
    describe = getattr(parse_agent(spec), "describe", None)
    return {"agent_identity": describe()} if callable(describe) else {}


def _replay_identity(access: _ArmAccess) -> dict[str, Any]:
    """A replay arm's scripts are part of what it is: their digest joins its identity."""
    return {} if access.replay is None else {"script_sha256": access.replay.sha256}


def _open_run_dir(out: Path, exp: Experiment, access: dict[str, _ArmAccess], jobs: int,
                  grace: float) -> dict[str, Any]:
    path = out / MANIFEST
    if path.exists():
        manifest = read_json_file(path)
        if manifest.get("kind") != "experiment":
            raise RunConflict(f"{out} holds a {manifest.get('kind')!r} run, not an experiment")
        return manifest
    # a start killed before its manifest leaves the copy (and maybe the manifest's temporary
    # file): that is still an empty run, not someone else's folder
    if out.exists() and not interrupted_start(out, own=(EXPERIMENT_COPY,)):
        raise RunConflict(f"{out} exists, is not empty and has no {MANIFEST}")
    manifest = _manifest(exp, access, jobs, grace)
    ExperimentManifest.read(manifest, path)  # the record's shape (records/experiment.py)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(exp.path, out / EXPERIMENT_COPY)
    atomic_write_json(path, manifest)
    return manifest


class _AttemptHooks(TrialHooks):
    """Binds one attempt's trial stages to the state database and the gateway."""

    def __init__(self, state: StateDB, attempt: Attempt, gateway: Gateway | None,
                 token: str | None, access: _ArmAccess, proxy: ProxyTarget | None,
                 grace: float, revision: str, ticket: Ticket) -> None:
        super().__init__()
        self.state, self.attempt, self.gateway, self.token = state, attempt, gateway, token
        self.ticket = ticket
        self.grace_seconds = grace
        self.verifier_revision = revision
        self.proxy = proxy if token else None
        self.ledger = state.root / attempt.dir / "model_calls.jsonl"
        self.model_env = {}
        if token and access.model and proxy is not None:
            base = proxy.base_url + "/v1"
            self.model_env = {"OPENAI_BASE_URL": base, "OPENAI_API_BASE": base,
                              "OPENAI_API_KEY": token, "ASSAY_MODEL": access.model,
                              "ASSAY_MODEL_PARAMS": json.dumps(access.params, sort_keys=True),
                              "ASSAY_MODEL_PROTOCOL": access.protocol}
            if access.protocol == "anthropic":  # Anthropic clients append /v1/messages
                self.model_env.update(ANTHROPIC_BASE_URL=proxy.base_url,
                                      ANTHROPIC_API_KEY=token, ANTHROPIC_MODEL=access.model)

    def before(self, stage: str) -> None:
        moves: dict[str, AttemptState] = {"agent": "running", "freeze": "freezing",
                                          "verify": "verifying"}
        nxt = moves[stage]
        self.attempt = self.state.move(self.attempt, nxt)

    def verify_gate(self) -> contextlib.AbstractContextManager[None]:
        return self.ticket.verifying()

    def after_agent(self, execution: dict[str, Any]) -> dict[str, Any]:
        if self.gateway is None or self.token is None:
            return execution
        self.gateway.close_attempt(self.token)
        usage = dict(self.gateway.attempt_usage(self.token))
        execution = {**execution, "model_usage": usage,
                     "assistant_steps_enforced_by": "gateway (completed assistant responses)"}
        if usage.get("exhausted"):
            execution.update(status="budget_exhausted",
                             detail=f"budget exhausted: {usage['exhausted']} (the gateway "
                                    "refused further calls)")
        elif (why := model_unavailable(self.ledger)) is not None:
            if execution.get("status") == "infra_error" and execution.get("detail"):
                why += f"; the agent's adapter: {execution['detail']}"  # its own diagnosis
            execution.update(status="infra_error", failure_code=MODEL_UNAVAILABLE, detail=why,
                             agent_status=execution.get("status"))
        return execution


class ExperimentRunner:
    def __init__(self, exp: Experiment, out: Path, *, jobs: int | None = None,
                 grace_seconds: float = DEFAULT_GRACE_SECONDS,
                 progress: ExperimentProgress | None = None,
                 total_cost_usd: float | None = None, holdout_reuse: bool = False,
                 executor: str = "local", ray_address: str | None = None,
                 gateway_host: str | None = None, ray_transfer: str | None = None,
                 verify_jobs: int | None = None, run_to_end: bool = False,
                 show_interim: bool = False) -> None:
        self.exp, self.out = exp, out
        self.run_to_end, self.show_interim = run_to_end, show_interim
        #: the looks of a sequential bar (``runner/sequential.py``), once the run is open
        self.looks: SequentialLooks | None = None
        self.executor_kind, self.ray_address = executor, ray_address
        self.ray_transfer = ray_transfer
        self.gateway_host = gateway_host
        self.holdout_reuse = holdout_reuse
        self.total_cost_usd = total_cost_usd
        self.jobs = jobs or exp.spec.concurrency
        if verify_jobs is not None and verify_jobs < 0:
            raise InputError("--verify-jobs must be 0 (no gate) or more")
        if verify_jobs is not None and executor != "local":
            raise InputError("--verify-jobs is for --executor local (a Ray attempt verifies on "
                             "its worker, within the resources its task asked for)")
        self.verify_jobs_asked = verify_jobs
        self.grace = grace_seconds
        self.progress: ExperimentProgress = progress or NullProgress()
        self.access = _arm_access(exp)
        problems = check_arms(exp)  # before anything is written: no verdict on a broken arm
        if problems:
            raise SuiteError(problems)
        self.agent_dirs: dict[str, Path] = {}
        for name, access in self.access.items():
            if access.replay is not None:  # a changed script is a changed experiment
                model = exp.identity["arms"][name]["model"]
                model.update(_replay_identity(access))
        self.plan = plan(exp)
        self.replay: ReplayServer | None = None
        self.stop_new = threading.Event()
        #: per arm, the outcomes of attempts whose agent never started, and the arms seen to
        #: start; ``broken_arm`` is the message once an arm's first attempts all failed so
        self.start_failures: dict[str, list[str]] = {}
        self.started_ok: set[str] = set()
        self.broken_arm: str | None = None
        fork_access = check_fork(exp)
        self.forks = (ForkPrefixes(exp, out, fork_access, grace_seconds)
                      if fork_access is not None else None)
        if self.forks is not None and executor != "local":
            raise InputError(f"{exp.path}: a fork experiment runs with --executor local only "
                             "(its prefixes share state on the driver)")

    def run(self) -> ExperimentResult:
        """Connect the executor first (a missing Ray or a wrong address writes nothing),
        then run every trial not yet done."""
        self.executor: Executor = make_executor(self.executor_kind,
                                                ray_address=self.ray_address,
                                                gateway_host=self.gateway_host,
                                                ray_transfer=self.ray_transfer)
        try:
            return self._run()
        finally:
            self.executor.close()
            self.progress.finish()  # also after an interrupt: a display says what it held

    def _run(self) -> ExperimentResult:
        spec = self.exp.spec
        holdout = holdout_gate(self.exp, self.out, reuse=self.holdout_reuse,
                               note=self.progress.note)  # a refused look creates nothing
        manifest = _open_run_dir(self.out, self.exp, self.access, self.jobs, self.grace)
        # local attempts verify here, behind the verify gate; Ray's on their worker, within
        # the resources their task asked for (runner/slots.py)
        asked = self.verify_jobs_asked
        self.verify_jobs = (None if self.executor.kind != "local" or asked == 0
                            else asked or min(self.jobs, usable_cores()))
        orphans = sweep_orphans_once()  # an earlier runner's, killed with SIGKILL
        ended = sum(len(o.killed) for o in orphans)
        if ended:
            self.progress.note(f"ended {ended} processes an earlier, killed runner left in "
                               f"{sum(1 for o in orphans if o.killed)} sandbox cgroups")
        stale = sweep_stale_images_once()  # and its attempts' disk images, still mounted
        if stale:
            self.progress.note(f"unmounted and removed {len(stale)} disk images an earlier, "
                               "killed runner left")
        session: dict[str, Any] = {
                   "started_at": utc_now(), "pid": os.getpid(), "jobs": self.jobs,
                   "verify_jobs": self.verify_jobs,
                   "orphans_swept": {"cgroups": len(orphans), "processes_ended": ended},
                   "watchdog_grace_seconds": self.grace, "assay": tool_identity(),
                   "holdout_reuse": self.holdout_reuse,
                   "executor": self.executor.describe()}
        if spec.bar is not None and spec.bar.sequential is not None:
            session.update(run_to_end=self.run_to_end, show_interim=self.show_interim)
        state = StateDB.open(self.out, _state_identity(self.exp), self.plan,
                             retries_infra=spec.retries.infra)
        try:  # after the identity check: a changed agent file is refused as a change
            self.agent_dirs = stage_agent_files(self.out, self.exp)
            self._open_looks(state, manifest)
        except BaseException:
            state.close()
            raise
        sock_dir = Path(tempfile.mkdtemp(prefix="assay-gw-"))
        session_tmp = contextlib.ExitStack()
        try:
            if holdout is not None:  # written down before the first trial (resumes too)
                manifest[HOLDOUT_KEY] = holdout.record()
                atomic_write_json(self.out / MANIFEST, manifest)
            # an attempt whose directory is gone has nothing to verify: an evidence gap,
            # reported when the session ends
            to_verify = [a for a in state.recover() if (self.out / a.dir).is_dir()]
            # the interrupted attempts are closed, their records kept: what their workspaces
            # and HOMEs left in scratch belongs to no living attempt any more
            old_socket = _swap_socket_note(self.out, sock_dir)
            removed = remove_scratch(self.out)
            _write_socket_note(self.out, sock_dir)
            if removed or old_socket:
                session["scratch_removed"] = removed + old_socket
                left_by = sum(1 for r in removed if not r.startswith("tmp/"))
                self.progress.note(f"removed the workspaces and HOMEs {left_by} interrupted "
                                   f"attempts left in {self.out / SCRATCH}, and "
                                   f"{len(removed) - left_by + len(old_socket)} temporary "
                                   "folders of the killed runner")
            session_tmp.enter_context(session_tempdir(self.out))
            interrupted = state.counts().attempts.get("interrupted", 0)
            prior, prior_complete = spent_so_far(self.out)
            cap = (self.total_cost_usd if self.total_cost_usd is not None
                   else spec.limits.total_cost_usd)
            host = getattr(self.executor, "gateway_host", None) or self.gateway_host
            body_mib = spec.limits.request_body_mib
            gateway = Gateway(host=host or "127.0.0.1", unix_socket=sock_dir / "gw.sock",
                              log_path=self.out / "gateway_events.jsonl",
                              total_cost_usd=None if cap is None else max(cap - prior, 0.0),
                              limits=ServerLimits() if body_mib is None else ServerLimits(
                                  request_body_bytes=int(body_mib * 1024 * 1024)),
                              **gateway_limits(spec.limits))
            session["gateway"] = gateway.applied_limits()  # what this session enforced
            if cap is not None and prior >= cap:
                self.stop_new.set()
            with gateway, serve_replay({n: a.replay for n, a in self.access.items()}) as replay:
                self.gateway, self.replay = gateway, replay
                self.proxy = ProxyTarget(unix_socket=sock_dir / "gw.sock")
                if self.executor.kind != "local":  # workers on other nodes: over the network
                    self.proxy = ProxyTarget(tcp=(gateway.host, gateway.port))
                    session["executor"]["gateway"] = f"{gateway.host}:{gateway.port}"
                for a in to_verify:
                    self._reverify(state, a)
                counts = state.counts()
                done = counts.trials.get("done", 0) + counts.trials.get("infra_error", 0)
                watch = getattr(self.progress, "watch_spend", None)  # optional (runner/progress.py)
                if watch is not None:
                    watch(lambda: (prior + gateway.spent(),
                                   prior_complete and gateway.spent_complete()),
                          cap, sorted({a.model for a in self.access.values()
                                       if a.model and a.model not in spec.prices}))
                self.progress.start(len(self.plan), done)
                self._schedule(state)
                spent = prior + gateway.spent()
                complete = prior_complete and gateway.spent_complete()
            counts = state.counts()
            gaps = [str(a.dir) for a in state.evidence_gaps()]
        finally:
            session_tmp.close()
            state.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
            remove_scratch(self.out)  # every attempt of this session has ended
        status: ExperimentStatus = "complete"
        message: str | None = None
        left = counts.trials.get("pending", 0)
        if self.broken_arm is not None:
            status, message = AGENT_START_FAILED, self.broken_arm
        elif self.looks is not None and self.looks.holding and left:
            stop = self.looks.stopped_at or {}
            status = "stopped_at_look"
            message = (f"stopped at look {stop.get('index', 0) + 1} of "
                       f"{len(self.looks.looks)} ({stop.get('tasks')} of "
                       f"{len(self.looks.order)} tasks): {stop.get('decision')}; {left} "
                       "planned trials not run (exp verdict shows the looks; exp run "
                       "--run-to-end runs them on purpose)")
        elif self.stop_new.is_set() and left:
            status = "budget_stopped"
            message = (f"stopped at the total budget: ${spent:.4f} spent"
                       + ("" if complete else " (a lower bound: some calls reported no usage)")
                       + f" of ${cap}; {left} trials not started")
        elif counts.trials.get("done", 0) < len(self.plan):
            status = "infra_errors"  # infra errors, grader errors, anything left: resumable
        if gaps:  # never complete: the records of these attempts are gone
            status = "evidence_gaps"
            message = (f"evidence lost: the directories of {len(gaps)} attempts are gone "
                       f"({', '.join(gaps[:10])}{', ...' if len(gaps) > 10 else ''}); their "
                       "records, ledgers and grades cannot be read. Restore them from a copy "
                       "of the run directory" + (f"; also {message}" if message else ""))
        session.update(ended_at=utc_now(), status=status, total_cost_usd=cap,
                       spent_usd_total=round(spent, 6), spent_complete=complete,
                       reverified=len(to_verify),
                       **({"evidence_gaps": gaps} if gaps else {}))
        forks = None
        if self.forks is not None:
            forks = {**fork_totals(self.out), "prefix_runs_this_session": self.forks.prefix_runs}
            session["fork"] = forks
        manifest.setdefault("sessions", []).append(session)
        ExperimentManifest.read(manifest, self.out / MANIFEST)
        atomic_write_json(self.out / MANIFEST, manifest)
        return ExperimentResult(self.out, status, dict(counts.trials), spent, complete, message,
                                len(to_verify), interrupted, forks,
                                unpriced_models=unpriced_models(spec), evidence_gaps=gaps)

    # --------------------------------------------------------------------- scheduling

    def _schedule(self, state: StateDB) -> None:
        running: dict[Future[str], TrialKey] = {}
        slots = AttemptSlots(self.jobs, self.verify_jobs)
        with ThreadPoolExecutor(max_workers=slots.max_alive,
                                thread_name_prefix="assay-trial") as pool:
            try:
                self._schedule_loop(state, pool, running, slots)
            except BaseException:  # Ray: end the remote attempts now (local: nothing to do)
                self.executor.interrupt()
                raise

    def _schedule_loop(self, state: StateDB, pool: ThreadPoolExecutor,
                       running: dict[Future[str], TrialKey], slots: AttemptSlots) -> None:
        while True:
            if self.gateway.total_exhausted:
                self.stop_new.set()
            if not self.stop_new.is_set() and slots.can_start():
                busy = set(running.values())
                allowed = self.looks.allowed() if self.looks is not None else None
                for key in state.pending(limit=slots.max_alive * 2 + len(busy)):
                    if not slots.can_start():
                        break
                    if key in busy or (allowed is not None and key.task not in allowed):
                        continue
                    attempt = state.begin_attempt(key)
                    ticket = slots.ticket()
                    fut = pool.submit(self._attempt_ending, state, attempt, ticket)
                    fut.add_done_callback(ticket.end)  # one never run (cancelled) ends too
                    running[fut] = key
                    busy.add(key)
            if not running:
                if self.looks is not None and self.looks.due(state):
                    self._look(state)
                    continue
                return
            slots.wait()
            for fut in [f for f in running if f.done()]:
                key = running.pop(fut)
                outcome = fut.result()
                self.progress.advance(TrialDone(key, outcome))
                self._watch_start(key, outcome)

    def _open_looks(self, state: StateDB, manifest: dict[str, Any]) -> None:
        """A sequential bar's looks: the frozen order and levels from the manifest, the looks
        earlier sessions took from the state database; a run a look stopped starts nothing
        unless it is run to the end on purpose."""
        frozen = manifest.get("sequential")
        if frozen is None:
            return
        self.looks = SequentialLooks(self.exp, self.out, frozen, run_to_end=self.run_to_end,
                                     show_interim=self.show_interim)
        self.looks.resume(state)
        stop = self.looks.stopped_at
        if stop is not None and self.looks.holding:
            self.stop_new.set()
            self.progress.note(f"look {stop['index'] + 1} decided {stop['decision']}: the "
                               "run stopped there (--run-to-end runs the rest on purpose)")

    def _look(self, state: StateDB) -> None:
        """Take the due look; one that decides stops new trials (none is in flight)."""
        assert self.looks is not None
        look = self.looks.take(state)
        self.progress.note(self.looks.shown(look))
        if self.looks.holding:
            self.stop_new.set()

    def _watch_start(self, key: TrialKey, outcome: str) -> None:
        """Stop starting attempts once an arm's first attempts all failed to start its agent:
        the rest would fail the same way and spend the run on nothing."""
        if outcome.startswith(AGENT_START_FAILED):
            self.start_failures.setdefault(key.arm, []).append(outcome)
        elif not outcome.startswith(("infra_error", "re-verified", "grader_error")):
            self.started_ok.add(key.arm)  # graded, or it reached its model: it did start
        failures = self.start_failures.get(key.arm, [])
        trials = sum(1 for k in self.plan if k.arm == key.arm)
        enough = min(START_FAILURES_TO_STOP, trials * (self.exp.spec.retries.infra + 1))
        if (self.broken_arm is None and key.arm not in self.started_ok
                and len(failures) >= enough):
            why = failures[0].removeprefix(AGENT_START_FAILED + ": ").removesuffix(
                " (will retry)")
            self.broken_arm = (f"arm {key.arm!r}: its agent could not start in its first "
                               f"{len(failures)} attempts ({AGENT_START_FAILED}: {why}); "
                               "stopped before spending the run on it: fix the arm and run "
                               "the same command again")
            self.stop_new.set()

    def _attempt_ending(self, state: StateDB, attempt: Attempt, ticket: Ticket) -> str:
        """:meth:`_attempt`, its slot given back before its future reads as done. A future is
        done before its done-callbacks run: had the slot been freed only by the callback, the
        scheduler could see the last attempt done, the slots still full, and nothing running,
        and end the run with trials never started (it did, once, under load)."""
        try:
            return self._attempt(state, attempt, ticket)
        finally:
            ticket.end()

    def _attempt(self, state: StateDB, attempt: Attempt, ticket: Ticket) -> str:
        key: TrialKey = attempt.trial
        bundle = self.exp.bundles[key.task]
        access = self.access[key.arm]
        attempt_dir = self.out / attempt.dir
        attempt_id = f"{key.task}/{key.arm}/{key.rep}/{attempt.label}"
        token = None
        proxy = self.proxy
        policy = bundle.spec.initial_state.network_policy
        upstream = access.upstream
        if access.replay is not None and self.replay is not None:
            upstream = Upstream(self.replay.base_url(f"{key.arm}/{key.task}"),
                                Secret("replay-no-key"))
        if upstream is not None and policy == "model-proxy-only":
            limits = self.exp.spec.limits
            try:
                token = self.gateway.open_attempt(
                    attempt_id, ledger_path=attempt_dir / "model_calls.jsonl",
                    upstream=upstream, model=access.model or "", protocol=access.protocol,
                    transcripts=self.exp.spec.transcripts and bundle.spec.transcripts,
                    limits=BudgetLimits(tokens=limits.tokens, cost_usd=limits.cost_usd,
                                        assistant_steps=bundle.spec.budget.assistant_steps),
                    prices={k: v.model_dump() for k, v in self.exp.spec.prices.items()})
                proxy = attempt_channel(self.gateway, token, self.proxy)
            except (ValueError, OSError) as exc:  # before the agent started: infrastructure
                if token is not None:
                    self.gateway.close_attempt(token)
                state.finish_attempt(attempt, "infra_error",
                                     reason=f"gateway: {type(exc).__name__}: {exc}"[:500])
                return "infra_error"
        hooks = _AttemptHooks(state, attempt, self.gateway, token, access, proxy,
                              self.grace, bundle.spec.acceptance.verifier_revision, ticket)
        hooks.agent_files = self.agent_dirs.get(key.arm)
        hooks.scratch_dir = attempt_scratch(self.out, attempt.dir)
        if self.forks is not None:  # start from the shared frozen state, not the pristine tree
            hooks.start_state = self.forks.start_state(key, hooks.model_env, self.gateway,
                                                       self.proxy)
        job = TrialJob(bundle, agent_spec_for(self.exp, key.arm), attempt_dir, key.rep,
                       int(attempt.label[1:]), f"{key.task}/{key.arm}/{key.rep}")
        try:
            res = self.executor.run(job, hooks)
        except Exception as exc:  # noqa: BLE001 - one attempt's crash is its record, not the run's
            if hooks.attempt.state == "verifying":
                state.move(hooks.attempt, "grader_error", reason=f"{type(exc).__name__}: {exc}")
                return "grader_error"
            state.finish_attempt(hooks.attempt, "infra_error",
                                 reason=f"{type(exc).__name__}: {exc}"[:500])
            return "infra_error"
        finally:
            if token is not None:
                self.gateway.close_attempt(token)  # idempotent; revoked whatever happened
            # the ledger is whole now (the token is revoked), on the driver whatever executor
            write_beside(attempt_dir)
        if res.status == WORKER_LOST:
            return self._worker_lost(state, hooks.attempt, res)
        if res.grade is None:
            reason = str(res.error)[:500]
            code = infra_code(reason)
            new_state = state.finish_attempt(hooks.attempt, "infra_error", reason=reason,
                                             code=code)
            shown = "infra_error" if code == "infra_error" else reason[:300]
            return shown + (" (will retry)" if new_state == "pending" else "")
        return self._record_grade(state, hooks.attempt, res.grade)

    def _record_grade(self, state: StateDB, attempt: Attempt, grade: Grade) -> str:
        if grade.validity.status != "valid":
            state.move(attempt, "grader_error", reason=grade.validity.detail)
            return "grader_error"
        try:
            state.grade_trial(attempt, accepted=grade.accepted,
                              failure_code=grade.failure_code,
                              revision=grade.details.verifier_revision)
        except NeverOverwrite:
            return "already graded"
        return "accepted" if grade.accepted else f"rejected:{grade.failure_code}"

    def _worker_lost(self, state: StateDB, attempt: Attempt, res: TrialResult) -> str:
        """A remote attempt whose worker or node died: as after a restart, an artifact that
        was frozen is only verified (here, on the driver), anything else is an infra error
        with Ray's evidence and the trial gets a new attempt within ``retries.infra``."""
        reason = str(res.error)[:500]
        if attempt.state == "freezing" and (self.out / attempt.dir / ARTIFACT_JSON).is_file():
            attempt = state.move(attempt, "verifying", reason=reason)
        if attempt.state == "verifying":
            return "worker lost, verified here: " + self._verify_frozen(state, attempt)
        new_state = state.finish_attempt(attempt, "infra_error", reason=reason)
        return f"infra_error ({WORKER_LOST})" + (" (will retry)" if new_state == "pending"
                                                 else "")

    def _reverify(self, state: StateDB, attempt: Attempt) -> None:
        """A frozen attempt after a restart, or a grader error: grade the same artifact again,
        never run the agent again. A new revision name each time, so no grade is overwritten."""
        self.progress.advance(TrialDone(attempt.trial,
                                        "re-verified: " + self._verify_frozen(state, attempt)))

    def _verify_frozen(self, state: StateDB, attempt: Attempt) -> str:
        key: TrialKey = attempt.trial
        bundle = self.exp.bundles[key.task]
        attempt_dir = self.out / attempt.dir
        base = bundle.spec.acceptance.verifier_revision
        revision, n = base, 1
        while grade_path(attempt_dir, revision).exists():
            n += 1
            revision = f"{base}.r{n}"
        if attempt.state == "grader_error":
            attempt = state.move(attempt, "verifying")
        try:
            execution = read_trial(attempt_dir).execution or {}
        except Exception:  # noqa: BLE001 - a torn trial.json: grade what is frozen
            execution = {}
        grade = verify(bundle, attempt_dir, revision=revision,
                       trial_id=f"{key.task}/{key.arm}/{key.rep}", execution=execution)
        write_beside(attempt_dir)  # with the new verdict (or for the first time, after a kill)
        return self._record_grade(state, attempt, grade)


def unpriced_models(spec: Any) -> list[str]:
    """The models of the experiment with no entry in its price table."""
    models = [arm.model for arm in spec.arms.values()]
    models.append(spec.fork.model if spec.fork is not None else None)
    return sorted({m.name for m in models if m is not None and m.name not in spec.prices})


_SOCKET_NOTE = "gateway-socket-dir"


def gateway_limits(limits: Any) -> dict[str, int]:
    """The experiment's ``limits:`` keys the gateway takes as settings (those set only: an
    unset one keeps the gateway's default)."""
    named = {"connections_per_attempt": limits.connections_per_attempt,
             "heads_per_attempt": limits.unfinished_heads_per_attempt,
             "max_connections": limits.connections_total,
             "concurrent_requests": limits.concurrent_requests}
    return {k: v for k, v in named.items() if v is not None}


def _swap_socket_note(out: Path, current: Path) -> list[str]:
    """The gateway's socket folder lives in the system's temporary directory (a Unix socket's
    path must be short), named in ``scratch`` so that the next start removes a killed
    runner's. Returns what it removed; called before ``remove_scratch``, and names
    ``current`` again after it."""
    note = out / SCRATCH / _SOCKET_NOTE
    removed: list[str] = []
    try:
        old = Path(note.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        old = None
    if old is not None and old.name.startswith("assay-gw-") and old != current \
            and old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
        removed.append(str(old))
    return removed


def _write_socket_note(out: Path, current: Path) -> None:
    note = out / SCRATCH / _SOCKET_NOTE
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(f"{current}\n", encoding="utf-8")


def spent_so_far(out: Path) -> tuple[float, bool]:
    """What earlier sessions of this run spent, from their ledgers on disk (the total budget
    covers the whole run, not one session, and a fork experiment's prefixes too), and whether
    every call's cost was known."""
    total, complete = 0.0, True
    ledgers = [*out.glob("trials/*/*/*/a*/model_calls.jsonl"),
               *out.glob("forks/*/*/a*/model_calls.jsonl")]
    for ledger in ledgers:
        sums = ledger_totals(ledger)
        total += sums["cost_usd"]
        complete = complete and sums["unpriced_calls"] == 0
    return total, complete


def run_experiment(path: Path, out: Path, *, jobs: int | None = None,
                   grace_seconds: float = DEFAULT_GRACE_SECONDS,
                   progress: ExperimentProgress | None = None,
                   total_cost_usd: float | None = None,
                   holdout_reuse: bool = False, executor: str = "local",
                   ray_address: str | None = None,
                   gateway_host: str | None = None,
                   ray_transfer: str | None = None,
                   verify_jobs: int | None = None,
                   allow_large_plan: bool = False,
                   tier: str | None = None, run_to_end: bool = False,
                   show_interim: bool = False) -> ExperimentResult:
    """Run (or resume) the experiment in ``path`` into ``out``. ``total_cost_usd`` overrides
    the file's whole-run cap (to finish a run it stopped, without changing the file);
    ``holdout_reuse`` lets a new run look at a holdout past its allowance
    (``runner/holdout.py``). ``executor`` is where attempts run (``local``, or ``ray`` on the
    cluster at ``ray_address``, ``runner/executors/local.py``); ``gateway_host`` is the address the
    gateway listens at for agents on other machines; ``ray_transfer`` how a Ray worker's files
    reach ``out`` (``shared_fs``, ``object_store``, ``auto``); ``verify_jobs`` how many
    local attempts verify at once (default: the usable cores, at most ``jobs``; 0: no gate,
    an attempt keeps its slot until it is graded; ``runner/slots.py``). A plan of more than
    ``PLAN_TRIALS_DEFAULT_MAX`` trials is refused, before anything is written, unless
    ``allow_large_plan``. With a sequential bar, ``run_to_end`` runs the trials a deciding look
    left (recorded; the run is then analysed as the fixed design), and ``show_interim`` shows
    each look's Δ and interval as it is taken (recorded in the session)."""
    exp = load_experiment(Path(path), tier=tier)  # tier: suites/tiers.py
    check_plan_size(exp, allow_large_plan=allow_large_plan)
    return ExperimentRunner(exp, Path(out), jobs=jobs, grace_seconds=grace_seconds,
                            progress=progress, total_cost_usd=total_cost_usd,
                            holdout_reuse=holdout_reuse, executor=executor,
                            ray_address=ray_address, gateway_host=gateway_host,
                            ray_transfer=ray_transfer, verify_jobs=verify_jobs,
                            run_to_end=run_to_end, show_interim=show_interim).run()


__all__ = ["ExperimentResult", "ExperimentRunner", "read_grade", "run_experiment"]
