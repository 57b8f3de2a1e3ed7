"""The experiment file: which tasks, which arms, how many repetitions, what may be spent.

Everything is checked before anything runs (an experiment that fails on its 300th trial because
of a typo in an arm wastes the 299 before it), and every problem names file, line and field.
``load_experiment`` also computes the experiment's **identity**: the file's bytes, each task's
fingerprint and each arm's agent, model and parameters. It is frozen into ``manifest.json`` and
the state database before the first trial, so a resume against a changed file, a changed task or
a changed arm is refused instead of mixing two experiments in one table.

``bar`` and ``weights`` are read, validated and kept in the identity: they must be fixed before
the run (see the statistics notes), so a resume with either changed is refused like any other
change; ``exp compare`` and ``exp verdict`` act on them.

``pairwise`` (optional) asks a pinned judge, after every trial is graded, which of two arms it
prefers task by task (``runner/pairwise.py``). While unset it is absent from the identity, so runs
begun before it existed resume. When set it is in the identity's settings: the file's bytes
(``file_sha256``) are in the identity anyway, so an edited block could not resume either way;
there the refusal names the field. The judge file itself (its model, prompt, rubric) is not in
the identity: a judge grades, it does not run, so editing it never invalidates trials; the
plan in ``<run>/pairwise/`` pins the judge's revision and refuses to mix two judges there.

Splits are never mixed by accident: without ``select.split`` only dev tasks may run (tasks
spanning splits are refused, naming them, and so are tasks all in validation or holdout: such a
look is taken on purpose, by naming the split). ``noise_floor: {arm: A}`` adds an A/A copy of
arm ``A`` named ``A~aa`` after every check of the file as written (``with_aa_copy``): from then
on it is an arm like the others, interleaved by ``plan`` and fingerprinted in the identity.

The file is bounded before it is parsed and its numbers before anything is planned
(``suites/limits.py``): at most 1 MiB, ``repetitions`` at most 10,000, ``concurrency`` at most
1,024, finite spending limits, and at most 1,000,000 trials in any plan. The plan is built in
memory and written to the state database before the first trial, so an unbounded
``repetitions: 1000000000`` would exhaust the machine before a single trial ran. A plan of more
than 10,000 trials (days of agent time) is refused by ``exp run`` unless ``--allow-large-plan``
says it is meant (:func:`check_plan_size`). Paths that name bundles, judges and replay scripts
are relative to this file and must exist.

The module runs past 400 lines because the file's schema, its cross-field checks and the
identity it yields are one contract, read together when any of them changes.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from assay.suites import limits
from assay.suites.agent_files import entry_fingerprint, normalize_entry
from assay.suites.bundle import Bundle, find_bundles, load_bundle, tree_digest
from assay.suites.errors import Problem, SuiteError
from assay.suites.experiment_pairwise import (
    Pairwise,
    check_pairwise,
    resolve_arms,
)
from assay.suites.textfile import read_text
from assay.suites.trial_key import TrialKey, identity_sha256
from assay.suites.yamlfile import key_lines, line_of, load_mapping, validation_error

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: Builds a ``Problem`` at a field path of the experiment file, with that field's line.
ProblemAt = Callable[[tuple[str, ...], str], Problem]


class _Strict(BaseModel):
    # no NaN or infinity anywhere: every number lands in the identity's strict JSON
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True,
                              allow_inf_nan=False)


class Select(_Strict):
    """Which of the found bundles take part; every given filter must hold."""

    split: Literal["dev", "validation", "holdout"] | None = None
    """Only bundles of this split."""
    families: list[str] | None = None
    """Only bundles whose ``family`` is one of these."""
    ids: list[str] | None = None
    """Only these task ids (each must exist)."""


class ModelSpec(_Strict):
    """The model an arm's agent talks to, through the gateway."""

    name: str = Field(min_length=1)
    """Model name asked of the upstream; also the key into ``prices``."""
    base_url_env: str | None = None
    """Environment variable holding the upstream's base URL (read by the gateway only)."""
    api_key_env: str | None = None
    """Environment variable holding the real key (read by the gateway only, never recorded)."""
    protocol: Literal["chat", "responses", "anthropic"] = "chat"
    """Which API the agent speaks to the gateway, and the gateway to the upstream."""
    script: str | None = Field(default=None, min_length=1)
    """For ``builtin/replay`` only (and needed by it): its script, a file or a folder of one
    script per task, relative to this file (``assay.models.replay_script``)."""

    @model_validator(mode="after")
    def _script_for_replay(self) -> ModelSpec:
        if self.name == "builtin/replay" and self.script is None:
            raise ValueError("builtin/replay needs a script: (a file or a folder of scripts)")
        if self.script is not None and self.name != "builtin/replay":
            raise ValueError("script: is for builtin/replay only")
        return self


class Arm(_Strict):
    """One configuration under test."""

    agent: str = Field(min_length=1)
    """Agent spec, e.g. ``command:python3 agent.py`` or a built-in such as ``oracle``."""
    model: ModelSpec | None = None
    """The model, for agents that call one."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Passed to the agent and pinned in the identity."""
    trigger_event: str | None = Field(default=None, min_length=1)
    """The event in the agent's stream (a JSON line whose ``type`` or ``event`` is this name,
    e.g. ``compaction``) that shows the mechanism under test fired; trials without it are
    marked "not triggered", never dropped."""
    agent_files: list[str] | None = Field(default=None, min_length=1)
    """Files and folders the agent needs (its script, its prompts), relative to this file:
    copied read-only into the sandbox at ``/assay/agent`` (``ASSAY_AGENT_DIR``), where relative
    paths of a ``command:`` resolve, and fingerprinted into the arm's identity."""

    @field_validator("agent_files")
    @classmethod
    def _agent_files(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        out = [normalize_entry(v) for v in value]
        if len(set(out)) != len(out):
            raise ValueError("an agent_files entry is named twice")
        return out

    @field_validator("params")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _has_non_finite(value):
            raise ValueError("a parameter is NaN or infinite: not a value an agent can be "
                             "given, nor one the identity's JSON can hold")
        return value


def _has_non_finite(value: Any) -> bool:
    import math

    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


class Limits(_Strict):
    """Spending limits; all optional, enforced by the gateway."""

    tokens: int | None = Field(default=None, ge=1, le=limits.MAX_TOKENS_PER_ATTEMPT)
    """Per trial attempt."""
    cost_usd: float | None = Field(default=None, gt=0, le=limits.MAX_COST_USD)
    """Per trial attempt, in USD from ``prices``."""
    total_cost_usd: float | None = Field(default=None, gt=0, le=limits.MAX_COST_USD)
    """The whole experiment: no new attempt starts once it is reached."""
    request_body_mib: float | None = Field(default=None, gt=0, le=1024)
    """The largest request body an agent may send the gateway, in MiB; unset: 32. A larger
    one is answered 413 without being read whole (the run's manifest records what applied)."""
    connections_per_attempt: int | None = Field(default=None, ge=1, le=4096)
    """Connections one attempt may hold open to the gateway, counted from their accept on the
    attempt's own channel; unset: 32. The sandbox's forwarder closes one past it itself; the
    gateway answers 429 (``connection_cap`` event)."""
    unfinished_heads_per_attempt: int | None = Field(default=None, ge=1, le=4096)
    """Connections of one attempt whose request head is not complete yet; unset: 16. At the
    limit its channel accepts nothing more until one completes or times out (``head_cap``)."""
    connections_total: int | None = Field(default=None, ge=8, le=65536)
    """Agent connections open at the gateway in all; unset: 2048, or half the descriptor
    limit. Shared fairly: each attempt with a channel gets an equal part, the shared port one
    more (``gateway_share`` when an attempt's part was what stopped it)."""
    concurrent_requests: int | None = Field(default=None, ge=1, le=4096)
    """Calls one attempt may have in flight to its upstream at once; unset: 16 (real agent
    CLIs stay near ten). A call past it waits for one of the attempt's own to finish."""


class Price(_Strict):
    """USD per million tokens."""

    input: float = Field(ge=0)
    """Uncached input tokens."""
    cached_input: float | None = Field(default=None, ge=0)
    """Cached input tokens; unset means the upstream's cached tokens cost as ``input``."""
    cache_write: float | None = Field(default=None, ge=0)
    """Tokens written to the prompt cache (Anthropic); unset means they cost as ``input``."""
    output: float = Field(ge=0)
    """Output tokens (reasoning included)."""


class Retries(_Strict):
    """New attempts for infrastructure failures only; task failures are never retried."""

    infra: int = Field(default=2, ge=0, le=limits.MAX_INFRA_RETRIES)
    """How many new attempts a trial gets after ``infra_error`` attempts."""


#: the most looks a sequential bar may take (each look's boundary is one numerical integration)
MAX_LOOKS = 100


class Sequential(_Strict):
    """Looks that may stop the run once the verdict is settled (``stats/sequential.py``):
    exactly one of ``looks`` and ``every``; the last look is always the whole plan."""

    looks: list[int] | None = Field(default=None, min_length=1, max_length=100)
    """Task counts at which the bar is read, increasing, each at least 4 (the interval is
    honest from four tasks), e.g. ``[10, 20, 40]``."""
    every: int | None = Field(default=None, ge=4)
    """A look every this many tasks (at least 4)."""
    spending: Literal["obrien_fleming", "pocock"] = "pocock"
    """The Lan-DeMets error-spending function: ``pocock`` spends evenly (stops sooner on
    average), ``obrien_fleming`` spends late (the last look's level stays near 95%)."""

    @model_validator(mode="after")
    def _one_rule(self) -> Sequential:
        if (self.looks is None) == (self.every is None):
            raise ValueError("give exactly one of looks: [task counts] and every: N")
        if self.looks is not None:
            if any(k < 4 for k in self.looks):
                raise ValueError("every look is at 4 tasks or more (the interval is honest "
                                 "from four tasks)")
            if any(b <= a for a, b in zip(self.looks, self.looks[1:], strict=False)):
                raise ValueError("looks must increase")
        return self


def sequential_looks(seq: Sequential, n_tasks: int) -> list[int]:
    """The task counts of the looks for a plan of ``n_tasks`` tasks: the looks below it and
    the whole plan last."""
    if seq.looks is not None:
        inner = [k for k in seq.looks if k < n_tasks]
    else:
        step = int(seq.every or n_tasks)
        inner = list(range(step, n_tasks, step))
    return [*inner, n_tasks]


class Bar(_Strict):
    """The decision rule, written down before the run (acted on by ``exp verdict``)."""

    primary: Literal["pass_rate"] = "pass_rate"
    """The primary metric: Δ of the task-weighted pass rate, B − A."""
    hoped_improvement: float
    """The Δ the change is hoped to reach."""
    max_regression: float = Field(ge=0)
    """The interval's lower bound must stay above −max_regression."""
    max_cost_increase: float | None = Field(default=None, ge=0)
    """Relative increase allowed in cost per completed task."""
    integrity_violations: int = Field(default=0, ge=0)
    """Integrity violations allowed in the candidate arm (a hard requirement)."""
    max_new_failures: int | None = Field(default=None, ge=0)
    """Tasks the baseline passes and the candidate fails, at most."""
    baseline: str | None = None
    """Arm A (the baseline); default: the first of two arms in ``arms``."""
    candidate: str | None = None
    """Arm B (the candidate); default: the second of two arms in ``arms``."""
    sequential: Sequential | None = None
    """Looks and an error-spending rule: the run may stop at the first look that accepts or
    rejects (docs/guide/verdicts.md, "A sequential bar")."""


class Fork(_Strict):
    """Start every arm from one shared state instead of the pristine tree (for mechanism
    changes, context compaction and the like, that only act deep into a run): a prefix agent
    runs once per (task, repetition) until ``until``, its workspace and HOME are frozen, and
    each arm continues from an identical copy. See docs/guide/experiments.md, "Fork experiments"."""

    prefix_agent: str = Field(min_length=1)
    """Agent spec of the prefix, e.g. ``command:python3 agent.py --until-compaction``
    (checked with the runner's agent parser before anything runs)."""
    until: int | str
    """Where the prefix stops: an event name or a step number (a positive int). Passed to the
    prefix as ``ASSAY_FORK_UNTIL``; the runner never interprets the agent's steps itself."""
    model: ModelSpec | None = None
    """The prefix's own model, through the gateway; unset: the prefix gets no model (the
    arms' models are theirs: the shared state must not depend on one arm's model)."""

    @field_validator("until", mode="plain")
    @classmethod
    def _until(cls, value: Any) -> int | str:
        # one message for both forms (a union would report each branch's complaint); a YAML
        # ``true`` is not step 1
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (
                isinstance(value, int) and value < 1) or (isinstance(value, str)
                                                          and not value.strip()):
            raise ValueError("until is an event name (a non-empty string) or a step number "
                             f"(a positive int), not {value!r}")
        return value


class NoiseFloor(_Strict):
    """Measure the setup's own noise: a second, interleaved copy of one arm (an A/A pair)."""

    arm: str = Field(min_length=1)
    """The arm to run twice (usually the baseline); its copy is named ``<arm>~aa``."""


#: The A/A copy of a noise-floor arm is named ``<arm>`` + this (``~`` is never in an arm name
#: the file may use, so it cannot collide with one).
AA_SUFFIX = "~aa"


def aa_arm(arm: str) -> str:
    """The name of the A/A copy of ``arm``."""
    return arm + AA_SUFFIX


def is_aa_arm(name: str) -> bool:
    """Whether ``name`` is an A/A copy (never an arm of a comparison by default)."""
    return name.endswith(AA_SUFFIX)


class Tier(_Strict):
    """A named selection for ``--tier`` (``suites/tiers.py``): its ``select`` replaces the
    file's, and it may ask for fewer repetitions; every other setting is the file's."""

    select: Select | None = None
    """The tasks this tier runs; absent: the file's ``select``."""
    repetitions: int | None = Field(default=None, ge=1)
    """Trials per (task, arm) in this tier; absent: the file's."""


class ExperimentSpec(_Strict):
    """``experiment.yaml``, as written."""

    name: str = Field(pattern=NAME_PATTERN)
    """The experiment's name (letters, digits, '.', '_', '-')."""
    tasks: list[str] = Field(min_length=1)
    """Bundle folders, or folders holding bundles, relative to this file."""
    select: Select = Field(default_factory=Select)
    """Which of those bundles take part."""
    repetitions: int = Field(default=1, ge=1, le=limits.MAX_REPETITIONS)
    """Trials per (task, arm)."""
    seed: int = 0
    """Seeds the schedule order and everything random in the run."""
    concurrency: int = Field(default=1, ge=1, le=limits.MAX_CONCURRENCY)
    """Attempts in flight at once (``-j`` overrides)."""
    arms: dict[str, Arm] = Field(min_length=1)
    """The configurations under test, by name."""
    limits: Limits = Field(default_factory=Limits)
    """Spending limits."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Pinned price table, by model name."""
    retries: Retries = Field(default_factory=Retries)
    """Retry policy."""
    bar: Bar | None = None
    """The decision rule, fixed before the run (``exp verdict`` applies it)."""
    weights: dict[str, float] | None = None
    """Task weights fixed before the run (Δ weights tasks by them)."""
    fork: Fork | None = None
    """Run a prefix once per (task, repetition) and start every arm from its frozen state."""
    pairwise: Pairwise | None = None
    """After the trials, a judge's per-task preference between two arms."""
    noise_floor: NoiseFloor | None = None
    """Run a second, interleaved copy of one arm and report the A/A difference: the noise
    floor of this setup (``exp verdict`` refuses to accept while it is not stable)."""
    tiers: dict[str, Tier | None] | None = None
    """Named selections (``smoke``, ``full``, …) that ``exp run --tier`` runs instead of the
    whole file, and ``exp plan --tier`` sizes."""
    transcripts: bool = True
    """Keep the bodies of every model call (what each call sent and received) in the
    attempt's ``transcript.jsonl``, content-addressed; ``false`` keeps only the ledger's
    figures and digests (each ledger row then says ``transcript: off``)."""


@dataclass(frozen=True)
class Experiment:
    path: Path
    spec: ExperimentSpec
    file_sha256: str
    bundles: dict[str, Bundle]
    """The selected bundles, by task id, sorted by id."""
    identity: dict[str, Any]

    @property
    def identity_sha256(self) -> str:
        return identity_sha256(self.identity)


def load_experiment(path: Path, tier: str | None = None) -> Experiment:
    """Validate the file, load and select its bundles and compute its identity; every problem
    found is reported at once as a ``SuiteError``. ``tier``: run only that tier of ``tiers:``
    (its selection and repetitions; the tier is part of the identity)."""
    path = Path(path)
    if not path.exists():
        raise SuiteError.one(path, "experiment file not found")
    raw, text = read_text(path, limit=limits.EXPERIMENT_FILE_MAX_BYTES,
                          what="the experiment file")
    data = load_mapping(path, text)
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(path, text, exc, items=True,
                               model=ExperimentSpec) from exc
    lines = key_lines(text, items=True)

    def problem(loc: tuple[str, ...], message: str) -> Problem:
        return Problem(path, line_of(lines, loc), ".".join(loc), message)

    if tier is not None:
        spec = _apply_tier(spec, tier, problem)
    problems = _check_names(spec, problem)
    found, load_problems = _load_tasks(path, spec, problem)
    problems += load_problems
    selected = _select(spec, found, problem, problems)
    problems += _check_scripts(path, spec, problem)
    if len(selected) * len(spec.arms) * spec.repetitions > limits.PLAN_TRIALS_CEILING:
        problems.append(problem(("repetitions",), f"{len(selected)} tasks x {len(spec.arms)} "
                                f"arms x {spec.repetitions} repetitions is over the ceiling of "
                                f"{limits.PLAN_TRIALS_CEILING:,} trials in one run: refused"))
    problems += _check_prices(spec, problem)
    files, file_problems = _agent_file_prints(path.parent, spec, problem)
    problems += file_problems
    problems += _check_bar(spec, problem)
    problems += _check_sequential(spec, len(selected), problem)
    if spec.pairwise is not None:
        problems += check_pairwise(path, spec.pairwise, pairwise_arms(spec), list(spec.arms),
                                   problem)
    if spec.weights is not None:
        for task, weight in spec.weights.items():
            if task not in found:
                problems.append(problem(("weights", task), f"no task {task!r} in tasks"))
            elif weight <= 0:
                problems.append(problem(("weights", task), "a weight must be above 0"))
    if spec.noise_floor is not None and spec.noise_floor.arm not in spec.arms:
        problems.append(problem(("noise_floor", "arm"), f"no arm {spec.noise_floor.arm!r} in "
                                f"arms (arms: {', '.join(spec.arms)})"))
    if problems:
        raise SuiteError(problems)
    spec = with_aa_copy(spec)
    if spec.noise_floor is not None and spec.noise_floor.arm in files:
        # the A/A copy runs the same agent files: fingerprinted (and staged) as its own arm's
        files[aa_arm(spec.noise_floor.arm)] = files[spec.noise_floor.arm]
    bundles = {b.id: b for b in sorted(selected, key=lambda b: b.id)}
    sha = hashlib.sha256(raw).hexdigest()
    settings = _settings(spec)
    if tier is not None:
        settings["tier"] = tier
    identity = {
        "file_sha256": sha,
        "settings": settings,
        "tasks": {tid: task_fingerprint(b) for tid, b in bundles.items()},
        "arms": {name: arm_identity(arm, files.get(name))
                 for name, arm in sorted(spec.arms.items())},
    }
    return Experiment(path=path, spec=spec, file_sha256=sha, bundles=bundles,
                      identity=identity)


def _apply_tier(spec: ExperimentSpec, tier: str, problem: ProblemAt) -> ExperimentSpec:
    if not spec.tiers or tier not in spec.tiers:
        known = ", ".join(sorted(spec.tiers or {})) or "none defined"
        raise SuiteError([problem(("tiers",), f"unknown tier {tier!r} ({known})")])
    chosen = spec.tiers[tier]
    if chosen is None:
        return spec
    update: dict[str, Any] = {}
    if chosen.select is not None:
        update["select"] = chosen.select
    if chosen.repetitions is not None:
        update["repetitions"] = chosen.repetitions
    return spec.model_copy(update=update)


def with_aa_copy(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec with the noise floor's A/A copy among its arms (after every check of the file
    as written): the copy is an arm like any other from here on, so it is scheduled
    interleaved with the others (``plan``), gets its own trials, and is fingerprinted in the
    identity and the manifest. Without ``noise_floor`` the spec is returned unchanged."""
    if spec.noise_floor is None:
        return spec
    arm = spec.noise_floor.arm
    arms = dict(spec.arms)
    arms.setdefault(aa_arm(arm), spec.arms[arm].model_copy(deep=True))
    return spec.model_copy(update={"arms": arms})


def _settings(spec: ExperimentSpec) -> dict[str, Any]:
    """The file's settings as frozen in the identity. Fields added after the first experiment
    format are left out while unset (absent, not null), so a run begun before they existed
    still resumes with the same identity."""
    settings = spec.model_dump(mode="json")
    for key in ("fork", "pairwise", "noise_floor", "tiers"):
        if settings.get(key) is None:
            settings.pop(key, None)
    if settings.get("transcripts") is True:  # the default, added later: absent as before
        settings.pop("transcripts")
    for key in ("request_body_mib", "connections_per_attempt", "unfinished_heads_per_attempt",
                "connections_total", "concurrent_requests"):
        if settings["limits"].get(key) is None:
            settings["limits"].pop(key, None)
    for arm in settings["arms"].values():
        for key in ("trigger_event", "agent_files"):
            if arm.get(key) is None:
                arm.pop(key, None)
    bar = settings.get("bar")
    if bar is not None:
        for key in ("baseline", "candidate", "sequential"):
            if bar.get(key) is None:
                bar.pop(key, None)
    return settings


def _check_names(spec: ExperimentSpec, problem: ProblemAt) -> list[Problem]:
    import re

    return [problem(("arms", name), "an arm name is a folder name: letters, digits, '.', '_' "
                    "and '-' only")
            for name in spec.arms if not re.fullmatch(NAME_PATTERN, name)]


def _load_tasks(path: Path, spec: ExperimentSpec,
                problem: ProblemAt) -> tuple[dict[str, Bundle], list[Problem]]:
    problems: list[Problem] = []
    found: dict[str, Bundle] = {}
    base = path.parent
    for i, entry in enumerate(spec.tasks):
        where = ("tasks", str(i))
        folder = (base / entry) if not Path(entry).is_absolute() else Path(entry)
        if not folder.is_dir():
            problems.append(problem(where, f"{folder} is not a folder"))
            continue
        roots = find_bundles([folder])
        if not roots:
            problems.append(problem(where, f"no task bundle (a folder with task.yaml) in "
                                    f"{folder}"))
        for root in roots:
            try:
                bundle = load_bundle(root)
            except SuiteError as exc:
                problems += exc.problems
                continue
            if bundle.id in found:
                problems.append(problem(where, f"task id {bundle.id!r} found twice: in "
                                        f"{found[bundle.id].root} and {root}"))
                continue
            found[bundle.id] = bundle
    return found, problems


def _select(spec: ExperimentSpec, found: dict[str, Bundle], problem: ProblemAt,
            problems: list[Problem]) -> list[Bundle]:
    sel = spec.select
    if sel.ids is not None:
        for i, tid in enumerate(sel.ids):
            if tid not in found and found:
                problems.append(problem(("select", "ids", str(i)), f"no task {tid!r} in tasks"))
        if len(set(sel.ids)) != len(sel.ids):
            problems.append(problem(("select", "ids"), "a task id is named twice"))
    chosen = [b for b in found.values()
              if (sel.split is None or b.spec.split == sel.split)
              and (sel.families is None or b.spec.family in sel.families)
              and (sel.ids is None or b.id in sel.ids)]
    if found and not chosen:
        problems.append(problem(("select",), f"selects none of the {len(found)} tasks found"))
    if sel.split is None and chosen:  # at select: when it is written, else at tasks:
        at = ("select",) if "select" in spec.model_fields_set else ("tasks",)
        problems += _unnamed_split(chosen, lambda msg: problem(at, msg))
    for b in chosen:  # no trial of it could run: refused here, not retried as infra errors
        why = b.spec.initial_state.environment.unsupported
        if why is not None:
            problems.append(problem(("tasks",), f"task {b.id!r} ({b.root}): unsupported "
                                    f"environment: {why}"))
    return chosen


def _unnamed_split(chosen: list[Bundle], problem: Callable[[str], Problem]) -> list[Problem]:
    """Without ``select.split`` only dev tasks run: a comparison never blends splits (a Δ
    over dev and holdout tasks is neither's), and a holdout (or validation) look is taken only
    on purpose, by naming its split, never because ``select:`` was left out."""
    splits: dict[str, list[str]] = {}
    for b in chosen:
        splits.setdefault(b.spec.split, []).append(b.id)
    if set(splits) == {"dev"}:
        return []
    counts = ", ".join(f"{name} ({len(ids)}: {', '.join(sorted(ids)[:3])}"
                       f"{', …' if len(ids) > 3 else ''})" for name, ids in sorted(splits.items()))
    if len(splits) > 1:
        return [problem(f"the tasks span several splits: {counts}; a "
                        "comparison never blends splits. Name one: select: {split: dev} to "
                        "develop on (validation or holdout only on purpose, in a run of its "
                        "own)")]
    (name,) = splits
    return [problem(f"every task is in the {name} split ({counts}) and "
                    f"select names no split: a {name} look is taken only on purpose. Write "
                    f"select: {{split: {name}}} to take it")]


def _check_scripts(path: Path, spec: ExperimentSpec, problem: ProblemAt) -> list[Problem]:
    """A ``builtin/replay`` script must exist (relative to this file), or the first trial of
    its arm would be the one to find out."""
    models: list[tuple[tuple[str, ...], ModelSpec]] = [
        (("arms", name, "model", "script"), arm.model)
        for name, arm in spec.arms.items() if arm.model is not None]
    if spec.fork is not None and spec.fork.model is not None:
        models.append((("fork", "model", "script"), spec.fork.model))
    out = []
    for loc, model in models:
        if model.script is None:
            continue
        where = Path(model.script)
        where = where if where.is_absolute() else path.parent / where
        if not where.exists():
            out.append(problem(loc, f"{where}: no such replay script (a file or a folder, "
                               "relative to the experiment file)"))
    return out


def check_plan_size(experiment: Experiment, *, allow_large_plan: bool = False) -> None:
    """Refuse a plan of more than ``PLAN_TRIALS_DEFAULT_MAX`` trials unless
    ``allow_large_plan`` (``exp run --allow-large-plan``): that many agent runs is days of
    machine time and money, more likely a typo in ``repetitions`` than a plan."""
    spec = experiment.spec
    trials = len(experiment.bundles) * len(spec.arms) * spec.repetitions
    if trials > limits.PLAN_TRIALS_DEFAULT_MAX and not allow_large_plan:
        raise SuiteError([problem_at(experiment, ("repetitions",), (
            f"{len(experiment.bundles)} tasks x {len(spec.arms)} arms x {spec.repetitions} "
            f"repetitions = {trials:,} trials, over the limit of "
            f"{limits.PLAN_TRIALS_DEFAULT_MAX:,}; pass --allow-large-plan if it is meant"))])


def _check_prices(spec: ExperimentSpec, problem: ProblemAt) -> list[Problem]:
    """A cost limit with an unpriced model could never be enforced: refused up front."""
    lim = spec.limits
    if lim.cost_usd is None and lim.total_cost_usd is None:
        return []
    out = [problem(("arms", name, "model", "name"),
                   f"model {arm.model.name!r} has no entry in prices, but limits set a cost")
           for name, arm in spec.arms.items()
           if arm.model is not None and arm.model.name not in spec.prices]
    fork_model = spec.fork.model if spec.fork is not None else None
    if fork_model is not None and fork_model.name not in spec.prices:
        out.append(problem(("fork", "model", "name"), f"model {fork_model.name!r} has no entry "
                           "in prices, but limits set a cost"))
    return out


def problem_at(experiment: Experiment, loc: tuple[str, ...], message: str) -> Problem:
    """A problem at a field of an already loaded experiment file, with that field's line: for
    checks a higher layer makes (the runner parses agent specs, which this layer cannot)."""
    text = experiment.path.read_text(encoding="utf-8")
    return Problem(experiment.path, line_of(key_lines(text, items=True), loc), ".".join(loc),
                   message)


def _check_bar(spec: ExperimentSpec, problem: ProblemAt) -> list[Problem]:
    """The bar must say which arm is which: by name, or by there being exactly two arms."""
    bar = spec.bar
    if bar is None:
        return []
    out = [problem(("bar", side), f"no arm {name!r} in arms")
           for side, name in (("baseline", bar.baseline), ("candidate", bar.candidate))
           if name is not None and name not in spec.arms]
    if (bar.baseline is None) != (bar.candidate is None):
        out.append(problem(("bar",), "name both baseline and candidate, or neither"))
    elif bar.baseline is None and len(spec.arms) != 2:
        out.append(problem(("bar",), f"{len(spec.arms)} arms: name the bar's baseline and "
                           "candidate"))
    elif bar.baseline is not None and bar.baseline == bar.candidate:
        out.append(problem(("bar", "candidate"), "the candidate is the baseline"))
    return out


def _check_sequential(spec: ExperimentSpec, n_tasks: int, problem: ProblemAt) -> list[Problem]:
    """A look past the plan could never be taken: refused before anything runs (a look equal
    to the plan is the last look, which every sequential bar has anyway)."""
    seq = spec.bar.sequential if spec.bar is not None else None
    if seq is None or not n_tasks:
        return []
    if seq.looks is None:
        count = len(sequential_looks(seq, n_tasks))
        return [] if count <= MAX_LOOKS else [problem(
            ("bar", "sequential", "every"), f"a look every {seq.every} of {n_tasks} tasks is "
            f"{count} looks, over the limit of {MAX_LOOKS}: look less often")]
    return [problem(("bar", "sequential", "looks", str(i)),
                    f"a look at {k} tasks, but the experiment selects {n_tasks}")
            for i, k in enumerate(seq.looks) if k > n_tasks]


def pairwise_arms(spec: ExperimentSpec) -> tuple[str, str] | None:
    """The pairwise block's arms A and B (``suites/experiment_pairwise.py``)."""
    if spec.pairwise is None:
        return None
    bar = spec.bar
    return resolve_arms(spec.pairwise, bar.baseline if bar else None,
                        bar.candidate if bar else None,
                        [a for a in spec.arms if not is_aa_arm(a)])


def bar_sha256(bar: dict[str, Any] | None) -> str | None:
    """The bar's fingerprint as frozen in the manifest (canonical JSON, as the identity)."""
    return None if bar is None else identity_sha256(bar)


def task_fingerprint(bundle: Bundle) -> dict[str, Any]:
    """What makes two runs of "the same task" the same: its task.yaml, its starting tree and
    its hidden tests, the instruction exactly as agents are told it (``instruction_sha256``:
    the task's text and the generated rules section), and the image it runs in. A pinned
    ``fixture_digest`` is the starting tree's identity (every trial checks the tree against
    it); an unpinned one is computed here.
    ``environment_image`` (only for a task pinned to one, so older runs resume): a resume
    whose task now runs in another image is refused like any other change."""
    state = bundle.spec.initial_state
    fixture = state.fixture_digest
    if fixture is None:
        if state.repository_commit:
            with tempfile.TemporaryDirectory(prefix="assay-fingerprint-") as tmp:
                bundle.export_starting_tree(Path(tmp) / "t")
                fixture = tree_digest(Path(tmp) / "t")
        else:
            fixture = tree_digest((bundle.root / state.repository).resolve())
    tests = tree_digest(bundle.tests_dir) if bundle.tests_dir.is_dir() else None
    image = ({"environment_image": state.environment_image}
             if state.environment_image is not None else {})
    # the text every agent is told (the instruction and the generated rules section)
    told = "sha256:" + hashlib.sha256(bundle.agent_instruction().encode("utf-8")).hexdigest()
    return {"revision": bundle.spec.revision, "task_yaml_sha256": bundle.spec_sha256,
            "fixture_digest": fixture, "tests_digest": tests,
            "instruction_sha256": told, **image}


def arm_identity(arm: Arm, agent_files: dict[str, str] | None = None) -> dict[str, Any]:
    """The agent spec, the model (name, protocol; never a key) and the parameters; with
    ``agent_files``, each entry's fingerprint (absent otherwise, so older runs resume)."""
    model = None
    if arm.model is not None:
        model = {"name": arm.model.name, "protocol": arm.model.protocol}
    out: dict[str, Any] = {"agent": arm.agent, "model": model, "params": arm.params}
    if agent_files is not None:
        out["agent_files"] = agent_files
    return out


def _agent_file_prints(base: Path, spec: ExperimentSpec, problem: ProblemAt
                       ) -> tuple[dict[str, dict[str, str]], list[Problem]]:
    """Each arm's ``agent_files`` fingerprinted, or the problem with each entry."""
    prints: dict[str, dict[str, str]] = {}
    problems: list[Problem] = []
    for name, arm in spec.arms.items():
        if arm.agent_files is None:
            continue
        prints[name] = {}
        for i, entry in enumerate(arm.agent_files):
            try:
                prints[name][entry] = entry_fingerprint(base, entry)
            except (ValueError, OSError) as exc:
                problems.append(problem(("arms", name, "agent_files", str(i)), str(exc)))
    return prints, problems


def plan(experiment: Experiment) -> list[TrialKey]:
    """Every trial, in a seeded random order that interleaves the arms.

    The (task, repetition) blocks are shuffled with the seed and, within each block, the arms
    come in their own seeded order: both arms of a comparison see the same stretch of time, the
    same concurrency and the same cache warmth, and no arm is always first. The same seed and
    file give the same order, so a resumed run continues the same schedule.

    With a sequential bar the tasks are first put in an order drawn from the seed
    (:func:`task_order`) and cut at the looks: every trial of the tasks before a look comes
    before any trial of the tasks after it, so each look sees a random sample of the suite
    with every arm on the same tasks. Within a stretch between looks the order is as above.
    """
    spec = experiment.spec
    rng = random.Random(spec.seed)
    seq = spec.bar.sequential if spec.bar is not None else None
    if seq is None:
        stretches = [list(experiment.bundles)]
    else:
        order = task_order(experiment)
        cuts = [0, *sequential_looks(seq, len(order))]
        stretches = [order[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    arms = sorted(spec.arms)
    out: list[TrialKey] = []
    for tasks in stretches:
        blocks = [(task, rep) for task in tasks for rep in range(spec.repetitions)]
        rng.shuffle(blocks)
        for task, rep in blocks:
            block_arms = arms[:]
            rng.shuffle(block_arms)
            out += [TrialKey(task, arm, rep) for arm in block_arms]
    return out


def task_order(experiment: Experiment) -> list[str]:
    """The tasks in an order drawn from the seed, stratified by family: each family's tasks
    are shuffled and spread evenly over the order (task i of a family of n sits at (i + u) / n,
    u drawn once per family), so any prefix holds each family in about its share of the suite.
    Without families every task is its own stratum and this is a plain shuffle."""
    rng = random.Random(f"task-order:{experiment.spec.seed}")
    families: dict[str, list[str]] = {}
    for tid in sorted(experiment.bundles):
        fam = experiment.bundles[tid].spec.family
        families.setdefault(fam if fam else f"\0{tid}", []).append(tid)
    if all(len(v) == 1 for v in families.values()):
        order = sorted(experiment.bundles)
        rng.shuffle(order)
        return order
    placed: list[tuple[float, float, str]] = []
    for name in sorted(families):
        tasks = families[name][:]
        rng.shuffle(tasks)
        u = rng.random()
        placed += [((i + u) / len(tasks), rng.random(), t) for i, t in enumerate(tasks)]
    placed.sort()
    return [t for _, _, t in placed]
