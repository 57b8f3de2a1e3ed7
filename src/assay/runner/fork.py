"""Fork experiments: run a prefix once per (task, repetition), freeze the state it leaves, and
start every arm's attempt from an identical copy of it.

A mechanism such as context compaction only acts deep into a run; comparing two arms end to
end mixes "did the mechanism help" with "did the run ever get there, and the same way". Forking
holds the road to that point fixed: one prefix run per (task, repetition), its workspace and
HOME frozen into ``DIR/forks/<task>/<rep>/<attempt>/state.tar`` (``records/fork.py``), and each
arm's attempt restores that tar, recomputes the digests and records them in ``trial.json``
(``fork``). Equal digests across the arms are the proof they started from the same state.

**The prefix contract** (for ``command:`` agents): the prefix runs in the same sandbox as a
trial (the task's resources and wall budget, the pristine starting tree at the workspace path,
a fresh HOME at ``AGENT_HOME``), with ``ASSAY_FORK_UNTIL`` (the event name or the step number
of ``fork.until``) and ``ASSAY_FORK_UNTIL_KIND`` (``event`` or ``step``). It runs until it
reaches that point, saves whatever it needs to continue under HOME (sessions, archived
transcripts: ``/tmp`` dies with the sandbox) and **exits 0**. Any other ending (non-zero exit,
timeout, resource limit, exhausted budget) means the point was not reached: no state is frozen,
and the arm's attempt ends as ``infra_error`` (not the arms' fault; retried with a new prefix
attempt within ``retries.infra``). The runner never interprets the agent's steps. The arms see
``ASSAY_FORK_STATE`` (the state digest) and ``ASSAY_FORK_UNTIL``: they know they continue.

**Model**: the prefix gets ``fork.model`` through the gateway (its own scoped token and ledger
``forks/…/model_calls.jsonl``, the per-attempt ``limits``), or no model when unset: the shared
state must not depend on which arm's model happened to run it. Its cost counts in the run's
total budget and is reported apart from the arms' (``fork_totals``).

**State on disk, not in state.sqlite**: a prefix attempt's directory is created (never reused)
and ``prefix.json`` written ``running`` before the prefix starts; ``state.json``, written
atomically after ``state.tar``, is the commit point of "frozen". One runner holds the run
directory (``StateDB``'s lock) and one thread per (task, repetition) runs a prefix at a time,
so a directory found ``running`` with no ``state.json`` belongs to a dead runner: it is marked
``interrupted`` and a new attempt runs. A frozen state is reused by every arm not yet run, in
this session or after a restart, and is never run again.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.agents import parse_agent
from assay.agents.base import AGENT_HOME, AgentContext
from assay.agents.mutants import clear_tree
from assay.environments.seed import seed_from_image
from assay.errors import RecordError, SuiteError, TrialRefused
from assay.models.client import redact_url
from assay.models.gateway.budget import Limits as BudgetLimits
from assay.models.gateway.service import Gateway, Secret, Upstream
from assay.records.fork import (
    FORKS,
    PREFIX_JSON,
    STATE_JSON,
    ForkPrefix,
    ForkStart,
    ForkState,
    fork_totals,
    freeze_state,
    restore_state,
)
from assay.records.io import atomic_write_json, read_json_file
from assay.records.manifest import utc_now
from assay.runner.gateway_channel import attempt_channel
from assay.runner.scratch import attempt_scratch
from assay.sandbox import SANDBOX_WORKDIR, ProxyTarget
from assay.suites.bundle import Bundle, check_starting_tree
from assay.suites.experiment import Experiment, Fork, TrialKey, problem_at


@dataclass
class _Access:
    model: str | None
    upstream: Upstream | None
    base_url_shown: str | None


def check_fork(exp: Experiment) -> _Access | None:
    """Everything about ``fork`` a lower layer could not check, as file:line:field problems:
    the prefix agent parses as an agent spec, and its model's upstream is configured."""
    fork = exp.spec.fork
    if fork is None:
        return None
    problems = []
    try:
        parse_agent(fork.prefix_agent)
    except ValueError as exc:
        problems.append(problem_at(exp, ("fork", "prefix_agent"), str(exc)))
    access = _Access(None, None, None)
    if fork.model is not None:
        if fork.model.protocol != "chat":
            problems.append(problem_at(exp, ("fork", "model", "protocol"),
                                       f"{fork.model.protocol!r} is not served by the gateway "
                                       "yet (chat only)"))
        env = fork.model.base_url_env or "MODEL_BASE_URL"
        base = os.environ.get(env)
        if not base:
            problems.append(problem_at(exp, ("fork", "model"), f"the environment variable "
                                       f"{env} (base URL of the upstream) is not set"))
        else:
            key = os.environ.get(fork.model.api_key_env or "MODEL_API_KEY", "")
            access = _Access(fork.model.name, Upstream(base.rstrip("/"), Secret(key)),
                             redact_url(base))
    if problems:
        raise SuiteError(problems)
    return access


def fork_manifest(fork: Fork) -> dict[str, Any]:
    """What ``manifest.json`` says about the fork (the base URL without credentials)."""
    base = None
    if fork.model is not None:
        url = os.environ.get(fork.model.base_url_env or "MODEL_BASE_URL")
        base = redact_url(url) if url else None
    return {"prefix_agent": fork.prefix_agent, "until": fork.until,
            "model": fork.model.name if fork.model else None,
            "protocol": fork.model.protocol if fork.model else None, "base_url": base}


def _label_number(p: Path) -> int:
    return int(p.name[1:]) if p.name[:1] == "a" and p.name[1:].isdigit() else 0


class ForkPrefixes:
    """The prefixes of one experiment run: one frozen state per (task, repetition)."""

    def __init__(self, exp: Experiment, out: Path, access: _Access, grace: float) -> None:
        assert exp.spec.fork is not None
        self.exp, self.out, self.access, self.grace = exp, out, access, grace
        self.fork: Fork = exp.spec.fork
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._guard = threading.Lock()
        self.prefix_runs = 0  # in this session, for the tests and the session record

    def _lock(self, task: str, rep: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((task, rep), threading.Lock())

    def base(self, task: str, rep: int) -> Path:
        return self.out / FORKS / task / str(rep)

    # ------------------------------------------------------------------ arms' side

    def start_state(self, key: TrialKey, model_env: dict[str, str], gateway: Gateway,
                    proxy: ProxyTarget | None) -> Callable[[Path, Path], ForkStart]:
        """The ``TrialHooks.start_state`` of one arm's attempt."""
        def start(workspace: Path, home: Path) -> ForkStart:
            fork_dir, state = self.state_for(key.task, key.rep, gateway, proxy)
            try:
                got = restore_state(fork_dir, state.tar_sha256, workspace, home)
            except (RecordError, OSError, ValueError) as exc:
                raise TrialRefused(f"fork state {fork_dir}: cannot be restored: {exc}") from exc
            differ = [k for k, v in got.items() if getattr(state, k) != v]
            if differ:
                raise TrialRefused(f"fork state {fork_dir}: the restored copy differs from "
                                   f"the frozen state ({', '.join(differ)})")
            model_env.update(ASSAY_FORK_STATE=got["state_digest"],
                             ASSAY_FORK_UNTIL=str(self.fork.until))
            return ForkStart(dir=str(fork_dir.relative_to(self.out)), until=self.fork.until,
                             tar_sha256=state.tar_sha256,
                             prefix_exit_code=state.prefix.exit_code,
                             prefix_wall_seconds=state.prefix.wall_seconds, **got)
        return start

    def state_for(self, task: str, rep: int, gateway: Gateway,
                  proxy: ProxyTarget | None) -> tuple[Path, ForkState]:
        """The frozen state of (task, rep): found on disk, or made now by a new prefix
        attempt. The lock makes the second arm wait for the first arm's prefix."""
        with self._lock(task, rep):
            found = self._frozen(task, rep)
            if found is not None:
                return found
            return self._run_prefix(task, rep, gateway, proxy)

    def _frozen(self, task: str, rep: int) -> tuple[Path, ForkState] | None:
        base = self.base(task, rep)
        if not base.is_dir():
            return None
        for d in sorted((p for p in base.iterdir() if p.is_dir()), key=_label_number):
            if (d / STATE_JSON).is_file():
                path = d / STATE_JSON
                data = read_json_file(path)
                ForkState.check_schema_id(data.get("schema"), path)
                return d, ForkState.read(data, path)
            prefix = d / PREFIX_JSON
            if prefix.is_file():
                rec = ForkPrefix.read(read_json_file(prefix), prefix)
                if rec.status == "running":  # its runner died: say so, run anew
                    rec.status = "interrupted"
                    rec.error = ("runner_restart: the runner ended before the prefix's state "
                                 "was frozen")
                    _save(prefix, rec)
        return None

    # ------------------------------------------------------------------ the prefix

    def _run_prefix(self, task: str, rep: int, gateway: Gateway,
                    proxy: ProxyTarget | None) -> tuple[Path, ForkState]:
        bundle = self.exp.bundles[task]
        base = self.base(task, rep)
        base.mkdir(parents=True, exist_ok=True)
        n = max((_label_number(p) for p in base.iterdir()), default=0) + 1
        label = f"a{n}"
        fork_dir = base / label
        fork_dir.mkdir(exist_ok=False)  # never reused
        record = ForkPrefix(
            schema=ForkPrefix.schema_id(), task=task, rep=rep, attempt=label,
            prefix_agent=self.fork.prefix_agent, until=self.fork.until,
            model=self.access.model, status="running", started_at=utc_now())
        _save(fork_dir / PREFIX_JSON, record)  # committed before the prefix starts
        with self._guard:
            self.prefix_runs += 1
        token = None
        env = {"ASSAY_FORK_UNTIL": str(self.fork.until),
               "ASSAY_FORK_UNTIL_KIND": "step" if isinstance(self.fork.until, int) else "event"}
        try:
            if (self.access.upstream is not None and proxy is not None
                    and bundle.spec.initial_state.network_policy == "model-proxy-only"):
                limits = self.exp.spec.limits
                token = gateway.open_attempt(
                    f"fork:{task}/{rep}/{label}", ledger_path=fork_dir / "model_calls.jsonl",
                    upstream=self.access.upstream, model=self.access.model or "",
                    limits=BudgetLimits(tokens=limits.tokens, cost_usd=limits.cost_usd),
                    transcripts=self.exp.spec.transcripts and bundle.spec.transcripts,
                    prices={k: v.model_dump() for k, v in self.exp.spec.prices.items()})
                # the prefix's own channel: its connections count against it from their accept
                proxy = attempt_channel(gateway, token, proxy)
                url = proxy.base_url + "/v1"
                env.update(OPENAI_BASE_URL=url, OPENAI_API_BASE=url, OPENAI_API_KEY=token,
                           ASSAY_MODEL=self.access.model or "")
            state = self._prefix_in_sandbox(bundle, fork_dir, record, env, token, gateway,
                                            proxy if token else None)
        except TrialRefused as exc:
            record.status, record.error, record.ended_at = "failed", str(exc), utc_now()
            _save(fork_dir / PREFIX_JSON, record)
            raise
        except Exception as exc:  # noqa: BLE001 - a prefix ends in a record, not a traceback
            record.status, record.ended_at = "failed", utc_now()
            record.error = f"{type(exc).__name__}: {exc}"[:500]
            _save(fork_dir / PREFIX_JSON, record)
            raise TrialRefused(f"fork prefix {fork_dir}: {record.error}") from exc
        finally:
            if token is not None:
                gateway.close_attempt(token)
        record.status, record.ended_at = "frozen", utc_now()
        _save(fork_dir / PREFIX_JSON, record)
        return fork_dir, state

    def _prefix_in_sandbox(self, bundle: Bundle, fork_dir: Path, record: ForkPrefix,
                           env: dict[str, str], token: str | None, gateway: Gateway,
                           proxy: ProxyTarget | None) -> ForkState:
        scratch = attempt_scratch(self.out, fork_dir)
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="assay-fork-", dir=scratch) as tmp:
            workspace, home = Path(tmp) / "workspace", Path(tmp) / "home"
            try:
                bundle.export_starting_tree(workspace)
                home.mkdir()
                check = check_starting_tree(bundle, workspace)
                record.fixture_digest = check.digest
                if check.problem:
                    raise TrialRefused(check.problem)
                seed_from_image(bundle, workspace)  # as a trial's workspace starts
                ctx = AgentContext(bundle, workspace, home, fork_dir / "agent", model_env=env,
                                   proxy=proxy, grace_seconds=self.grace)
                run = parse_agent(self.fork.prefix_agent).run(ctx)
                execution = run.to_record()
                if token is not None:
                    gateway.close_attempt(token)
                    usage = dict(gateway.attempt_usage(token))
                    execution["model_usage"] = usage
                    if usage.get("exhausted"):
                        execution.update(status="budget_exhausted",
                                         detail=f"budget exhausted: {usage['exhausted']}")
                record.execution = execution
                record.exit_code, record.wall_seconds = run.exit_code, run.wall_seconds
                _save(fork_dir / PREFIX_JSON, record)
                if execution["status"] != "succeeded":
                    raise TrialRefused(
                        f"fork prefix {fork_dir.relative_to(self.out)} did not reach "
                        f"until={self.fork.until!r}: {execution['status']} (exit code "
                        f"{run.exit_code}){': ' + run.detail if run.detail else ''}")
                frozen = freeze_state(workspace, home, fork_dir)
            finally:
                clear_tree(workspace)
        state = ForkState.read({
            "schema": ForkState.schema_id(), "task": record.task, "rep": record.rep,
            "attempt": record.attempt, "until": self.fork.until, **frozen,
            "restored_at": {"workspace": SANDBOX_WORKDIR, "home": AGENT_HOME},
            "prefix": {"status": execution["status"], "exit_code": run.exit_code,
                       "wall_seconds": run.wall_seconds, "ended_by": run.ended_by},
            "frozen_at": utc_now()}, fork_dir / STATE_JSON)
        _save(fork_dir / STATE_JSON, state)  # the commit point: frozen
        return state


def _save(path: Path, record: ForkPrefix | ForkState) -> None:
    """Written atomically, keeping only the fields that were set."""
    atomic_write_json(path, record.model_dump(mode="json", by_alias=True, exclude_unset=True))


__all__ = ["FORKS", "ForkPrefixes", "check_fork", "fork_manifest", "fork_totals"]
