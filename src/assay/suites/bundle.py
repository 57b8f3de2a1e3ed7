"""Agent task bundles: a task that ships its starting tree, hidden tests, reference fix and the
program that decides acceptance.

``task.yaml`` is validated with pydantic and every error names the field (and line). The
starting tree is pinned by ``fixture_digest``: a trial refuses a tree that does not match, so two
trials of "the same task" really started from the same bytes.

Every path ``task.yaml`` names stays inside the bundle folder, after symbolic links
(``suites/confine.py``), and the file itself is bounded (``suites/limits.py``): a bundle may
come from anyone, and what it names is read on the host and handed to the agent.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from assay.records.workspace import DEFAULT_IGNORED_PATHS, WorkspaceLimits
from assay.suites import limits
from assay.suites.confine import links_out, path_problem
from assay.suites.errors import Problem, SuiteError
from assay.suites.image_ref import DIGEST_RE, is_reference, parse_reference
from assay.suites.textfile import read_text
from assay.suites.yamlfile import load_mapping, validation_error

TASK_FILE = "task.yaml"
CHECKS = ("behavior", "regression", "integrity")


class _Strict(BaseModel):
    # Attribute docstrings become the field descriptions docs/reference/task.md shows.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Environment(_Strict):
    """What the task needs of the machine."""

    requires: list[str] = Field(default_factory=list)
    """Commands or Python modules the task needs inside the sandbox (``python3``, ``pytest``,
    ``node``...): a trial on a machine that lacks one is refused before the agent starts, and
    the versions found are recorded."""
    unsupported: str | None = Field(default=None, min_length=1)
    """Why this machine cannot give the task the environment it needs (a container image, a
    GPU...): the bundle is kept, but no trial runs and ``task check`` reports the reason."""
    image: str | None = Field(default=None, min_length=1)
    """The source of the task's pinned environment: an image in a registry
    (``REGISTRY/NAME@sha256:…``, or ``REGISTRY/NAME:TAG``, resolved once a run and recorded
    with the digest it resolved to; ``task lint`` says it is unpinned), pulled with ``assay env
    pull``; or a path inside the bundle: a Debian recipe (``*.yaml``), a ``Dockerfile`` or an
    OCI layout / ``docker save`` archive, which ``assay env build <path>`` builds into the
    image store. ``initial_state.environment_image`` pins the result. Null: the task runs on
    the host's own system, as before."""
    approximate_base: bool = False
    """For a ``Dockerfile`` image: when its ``FROM`` image cannot be pulled (offline, no
    credentials), build on the Debian release that stands for it instead (the translation;
    every approximation is recorded in the image's ``substitutions``). False (the default): a
    base that cannot be pulled makes the task ``unsupported here: cannot pull REF (reason)``.
    ``task check --approximate-base`` and ``env build --approximate-base`` ask the same."""
    users: Literal["one", "several"] = "one"
    """Users in the image's sandboxes. Either way the sandbox's ids 0-65535 are unprivileged
    host ids, never the host's root (as root; see docs/guide/security.md). ``one``: the command
    runs as uid 1000 with no capability and cannot switch user (as before). ``several``: as
    root, with a container root's capabilities (inside the sandbox only) and the image's own
    ``passwd``/``group``: a test can switch user (``su``, ``runuser``, ``setpriv``,
    ``subprocess.run(user="nobody")``) and a 0600 file of root's is unreadable to ``nobody``.
    Where the machine cannot map a range (assay not running as root), the trial records a
    warning and runs with one user. Needs ``environment.image``."""
    engine: Literal["bwrap", "docker", "podman"] = "bwrap"
    """What runs the pinned image: ``bwrap`` (assay's own sandbox with the image as its root,
    no daemon) or, on machines where they work, ``docker``/``podman`` (not implemented yet: a
    trial asking for them is refused with that reason)."""


def _same_repository(source: str, pin: str) -> bool:
    """``environment.image: REG/NAME:TAG`` pinned by ``environment_image: REG/NAME@sha256:…``
    (what ``task lint --write-digest`` leaves): the same repository."""
    return is_reference(source) and parse_reference(source).name == parse_reference(pin).name


class InitialState(_Strict):
    """The tree the agent starts from and what it may reach."""

    repository: str
    """The starting tree: a folder inside the bundle (a git repository when
    ``repository_commit`` is set)."""
    repository_commit: str | None = None
    """A commit of ``repository`` to start from (``git archive``); null: the folder as it is."""
    fixture_digest: str | None = None
    """``sha256:<64 hex>`` of the starting tree: a trial refuses a tree that does not match, so
    two trials of the same task really start from the same bytes."""
    git: bool = True
    """Whether the agent's workspace starts as a git repository of one commit of the starting
    tree (fixed author and date, no other history; ``.git`` is never part of the
    deliverable), so ``git status`` / ``git diff`` work as in any checkout; false: a plain
    folder."""
    network_policy: Literal["none", "model-proxy-only"] = "none"
    """``none``: no network at all; ``model-proxy-only``: only assay's gateway to the arm's
    model. An arm with a model needs ``model-proxy-only`` (refused at load otherwise)."""
    environment: Environment = Field(default_factory=Environment)
    """What the task needs of the machine."""
    environment_image: str | None = Field(default=None, min_length=1, max_length=512)
    """The image the agent's and the verifier's sandboxes run in, pinned. Either a registry
    image by its manifest digest, ``REGISTRY/NAME@sha256:<64 hex>`` (pulled with skopeo into
    the image store on first use; ``environment.image`` may then be left out), or
    ``sha256:<64 hex>``, the digest of the root filesystem built from ``environment.image``.
    A trial refuses an image it cannot pull, one not in the store (``assay env build <path>``
    makes it) and a build whose digest differs; both digests (the registry's and the root
    filesystem's) are recorded in the manifest and every trial record. Null: the host's own
    system."""

    @field_validator("environment_image")
    @classmethod
    def _pin_shape(cls, v: str | None) -> str | None:
        if v is None or DIGEST_RE.match(v):
            return v
        if not is_reference(v):
            raise ValueError("must be sha256:<64 hex digits> (a root filesystem) or "
                             "REGISTRY/NAME@sha256:<64 hex digits> (a registry image; a "
                             ":TAG is accepted and reported unpinned by task lint)")
        return v

    @model_validator(mode="after")
    def _image_pair(self) -> InitialState:
        pin = self.environment_image
        if pin is not None and not DIGEST_RE.match(pin):  # a registry image names itself
            if self.environment.image is None:
                self.environment.image = pin
            elif self.environment.image != pin and not _same_repository(
                    self.environment.image, pin):
                raise ValueError("environment_image pins a registry image, and "
                                 "environment.image names another source; leave one out")
        if pin is not None and self.environment.image is None:
            raise ValueError("environment_image pins an image but environment.image names no "
                             "source to build it from")
        if self.environment.users == "several" and self.environment.image is None:
            raise ValueError("environment.users: several needs an image (environment.image or "
                             "a registry environment_image): the host's system has one user "
                             "in the sandbox")
        return self

    @field_validator("fixture_digest")
    @classmethod
    def _digest_shape(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("sha256:") or len(v) != 71):
            raise ValueError("must look like sha256:<64 hex digits>")
        return v


class Resources(_Strict):
    """Limits of the agent's sandbox, recorded as applied in every trial."""

    cpu_cores: float = Field(default=1, gt=0)
    """CPU share of the agent's sandbox (cgroup quota where available)."""
    memory_limit_mib: int = Field(default=2048, ge=16)
    """Memory of the agent's sandbox; past it the attempt ends as ``resource_limit``."""
    pids: int = Field(default=256, ge=4)
    """Processes the agent's sandbox may hold at once."""
    workspace_mib: int = Field(default=1024, ge=1)
    """What the freeze keeps of the workspace, by apparent size (a sparse file counts at its
    length): over it no artifact is written and the attempt ends as ``resource_limit``."""
    workspace_files: int = Field(default=100_000, ge=1)
    """Files, folders and links the frozen workspace may hold; over it, as above."""


class Budget(_Strict):
    """Time and steps."""

    agent_wall_seconds: float = Field(default=900, gt=0, le=limits.MAX_AGENT_WALL_SECONDS)
    """The agent's wall-clock budget; past it the agent is stopped and the trial is
    ``agent_timeout`` (a failure, never retried)."""
    assistant_steps: int | None = Field(default=None, ge=1, le=limits.MAX_ASSISTANT_STEPS)
    """Model calls the agent may make; past it the gateway refuses (``budget_exhausted``)."""
    verifier_wall_seconds: float = Field(default=120, gt=0,
                                         le=limits.MAX_VERIFIER_WALL_SECONDS)
    """Wall-clock limit of each verifier check; a candidate that makes a check exceed it
    fails that check."""


#: Top-level folders a reward directory may not be mounted in: the workspace, assay's own
#: mounts, and what the sandbox binds from the host (a mount point there cannot be created).
_SYSTEM_DIRS = frozenset({"work", "assay", "proc", "dev", "tmp", "usr", "etc", "bin", "sbin",
                          "lib", "lib32", "lib64", "libx32"})


class RewardFile(_Strict):
    """Where the check's script writes its reward, and the least reward that passes."""

    dir: str = "/logs/verifier"
    """Absolute path inside the verifier's sandbox; an empty directory only that one check run
    sees is mounted there, and only the verifier reads what is left in it."""
    threshold: float = Field(default=1.0, allow_inf_nan=False)
    """The least reward that passes."""

    @field_validator("dir")
    @classmethod
    def _dir_ok(cls, v: str) -> str:
        from pathlib import PurePosixPath

        parts = PurePosixPath(v).parts
        if (not v.startswith("/") or "\0" in v or ".." in parts or len(parts) < 2
                or parts[1] in _SYSTEM_DIRS):
            raise ValueError("must be an absolute path outside the workspace (/work), /assay "
                             "and the system's folders (" + ", ".join(
                                 f"/{d}" for d in sorted(_SYSTEM_DIRS - {"work", "assay"}))
                             + ")")
        return v


class Command(_Strict):
    """One check: a shell command run on a fresh copy of the delivered tree."""

    command: str = Field(min_length=1)
    """The shell command; ``$ASSAY_TESTS`` names the hidden tests' folder."""
    counts: Literal["required", "optional"] = "required"
    """``required``: the output must show a test runner's summary with at least one passed
    test and none failed; exiting 0 is not enough (a candidate can exit before any test
    runs). ``optional``: for commands that are not test runners; the exit code decides."""
    tamper_evident: bool = True
    """A test-runner check is decided from assay's structured report, the expected ids learned
    on trusted code and canary tests; opt out only for a command that is not a test runner
    (the grade then says the check is not tamper-evident)."""
    reward: RewardFile | None = None
    """Set: the command's verdict is the number it writes into a directory the verifier mounts
    fresh for this one run (Harbor's ``reward.txt`` / ``reward.json``), not its exit code."""

    @model_validator(mode="after")
    def _reward_not_tamper_evident(self) -> Command:
        if self.reward is not None and self.tamper_evident:
            raise ValueError("a reward-file check is decided by the number the script writes, "
                             "not by assay's test report (whose must-fail canaries would make "
                             "the script write a failing reward): set tamper_evident: false")
        return self


class JudgePass(_Strict):
    """What a judgement must say for the judge check to pass: one criterion's score at least
    ``at_least`` (an integer scale) or one of ``one_of`` (a label scale)."""

    criterion: str = Field(min_length=1)
    """The judge's criterion whose score decides."""
    at_least: int | None = None
    """The least score that passes (an integer scale)."""
    one_of: list[str] | None = Field(default=None, min_length=1)
    """The labels that pass (a label scale)."""


#: What a judge may read of a trial (``grading/judge_material.PARTS``).
JudgeShown = Literal["diff", "files", "trajectory", "answer"]


def _default_shown() -> list[JudgeShown]:
    return ["diff", "trajectory"]


class JudgeCheck(_Strict):
    """``acceptance.judge``: a pinned judge reads the frozen artifact and the recorded
    trajectory (never the live workspace). Not required unless ``required: true``: its result
    is recorded with the grade and changes nothing else."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    judge: str = Field(min_length=1)
    """The judge.yaml, relative to the bundle (outside the starting tree)."""
    required: bool = False
    """True: a failing judgement rejects the trial; false: it is recorded only."""
    pass_: JudgePass = Field(alias="pass")
    """What the judgement must say to pass."""
    show: list[JudgeShown] = Field(default_factory=_default_shown, min_length=1)
    """What the judge reads of the trial."""


class Acceptance(_Strict):
    """Who decides whether the delivered tree is accepted."""

    verifier_revision: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Names the grading rules; a new revision is graded beside the old one, never over it."""
    required: list[Literal["behavior", "regression", "integrity"]]
    """The checks that must all pass for the trial to be accepted."""
    behavior: Command | None = None
    """The hidden tests that show the task is done (they fail on the starting tree)."""
    regression: Command | None = None
    """The tests that must keep passing."""
    protected_paths: list[str] = Field(default_factory=list)
    """Globs the agent must not change (the public tests, say)."""
    allowed_paths: list[str] | None = None
    """Globs the agent may change; null: anywhere outside ``protected_paths``."""
    allowed_binaries: list[str] = Field(default_factory=list)
    """Importable compiled files (bytecode, extension modules) the deliverable may add, by
    glob; other machine code (a compiled program) needs no listing."""
    ignored_paths: list[str] | None = None
    """What the freeze leaves out of the artifact as inert (and lists in ``artifact.json``):
    caches and tooling nothing in a check loads. Null: the defaults (``__pycache__``,
    ``.pytest_cache``, ``.mypy_cache``, ``.ruff_cache``, ``.hypothesis``, ``a folder holding
    pyvenv.cfg`` (a virtual environment), ``*.egg-info``, ``*.dist-info``, ``build/**``,
    ``dist/**``, ``node_modules``, ``.tox``, ``.nox``, ``.coverage``, ``.coverage.*``,
    ``htmlcov``, ``*.swp``, ``*.swo``, ``*~``, ``.DS_Store``, ``Thumbs.db``, and a ``.pyc``
    beside its source). A list replaces them: to extend, repeat them."""
    judge: JudgeCheck | None = None
    """A pinned judge's check of the frozen artifact (``acceptance.judge``)."""
    tell_agent: bool = True
    """Whether the instruction every agent receives ends with a generated section naming the
    protected paths, the allowed paths (when set) and that hidden tests judge the work
    (``suites/bundle.rules_section``); false: the instruction alone. Either way the text the
    agent saw is recorded with the trial (``instruction.md``) and in the task's fingerprint."""

    @field_validator("ignored_paths")
    @classmethod
    def _ignored_ok(cls, v: list[str] | None) -> list[str] | None:
        for pattern in v or []:
            clean = pattern.strip("/")
            if not clean or clean in ("*", "**", "**/*", "*/**", "**/**", ".") \
                    or ".." in clean.split("/"):
                raise ValueError(f"{pattern!r} would leave out the deliverable itself: name "
                                 "a cache folder or file pattern (e.g. .tox, **/*.log)")
        return v

    @field_validator("required")
    @classmethod
    def _required_ok(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one check")
        if len(set(v)) != len(v):
            raise ValueError("a check is named twice")
        return v


class TaskSpec(_Strict):
    """``task.yaml``, as written."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """The task's id, unique within an experiment."""
    revision: int = Field(ge=0)
    """Raised whenever the task changes; part of its fingerprint."""
    family: str | None = None
    """Tasks of one family are correlated: intervals cluster by family."""
    split: Literal["dev", "validation", "holdout"] = "dev"
    """Which split the task belongs to; experiments run dev tasks unless they name a split."""
    family_must_not_cross_splits: bool = False
    """True: no family may have tasks in both dev and holdout (a holdout task whose siblings
    are tuned on in dev is not held out); ``task lint`` warns when one does."""
    instruction: str = "instruction.md"
    """The file the agent is given as its task, inside the bundle."""
    initial_state: InitialState
    """The starting tree and what the agent may reach."""
    resources: Resources = Field(default_factory=Resources)
    """Limits of the agent's sandbox."""
    budget: Budget = Field(default_factory=Budget)
    """Time and steps."""
    acceptance: Acceptance
    """Who decides acceptance."""
    transcripts: bool = True
    """Keep the bodies of this task's model calls in each attempt's transcript (``false``: only
    the ledger's figures and digests, e.g. for a task whose prompts must not be kept; the
    experiment's ``transcripts: false`` turns them off for every task)."""


@dataclass(frozen=True)
class Bundle:
    root: Path
    spec: TaskSpec
    spec_sha256: str

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def instruction_path(self) -> Path:
        return self.root / self.spec.instruction

    def agent_instruction(self) -> str:
        """What every agent is told: the task's instruction, then (unless
        ``acceptance.tell_agent: false``) the rules it will be held to."""
        text = self.instruction_path.read_text(encoding="utf-8")
        section = rules_section(self.spec) if self.spec.acceptance.tell_agent else None
        if section is None:
            return text
        return text.rstrip("\n") + "\n\n" + section

    @property
    def ignored_paths(self) -> list[str]:
        """What the freeze leaves out: the task's ``acceptance.ignored_paths`` or the defaults,
    and always the top ``.git`` folder."""
        own = self.spec.acceptance.ignored_paths
        out = list(DEFAULT_IGNORED_PATHS) if own is None else list(own)
        # the workspace's own repository (``initial_state.git``) is assay's, never a deliverable
        return out if GIT_RULE in out else [*out, GIT_RULE]

    def workspace_limits(self) -> WorkspaceLimits:
        res = self.spec.resources
        return WorkspaceLimits(max_bytes=res.workspace_mib << 20,
                               max_entries=res.workspace_files)

    @property
    def tests_dir(self) -> Path:
        return self.root / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.root / "solution"

    def export_starting_tree(self, dest: Path) -> None:
        """Write a fresh copy of the starting tree into ``dest`` (which must not exist)."""
        state = self.spec.initial_state
        source = (self.root / state.repository).resolve()
        if state.repository_commit:
            dest.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(source), "archive", "--format=tar", state.repository_commit],
                capture_output=True, check=False, timeout=120)
            if archive.returncode != 0:
                raise SuiteError.one(self.root / TASK_FILE, "git archive failed: "
                                     + archive.stderr.decode(errors="replace").strip(),
                                     field="initial_state.repository_commit")
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True,
                           timeout=120)
        else:
            shutil.copytree(source, dest, symlinks=True)


#: The starting tree against the digest task.yaml pins: ``missing`` when nothing is pinned.
DigestState = Literal["ok", "missing", "mismatch"]


@dataclass(frozen=True)
class DigestCheck:
    """The starting tree's digest against the pinned one: ``state`` is ``ok``, ``missing``
    (nothing pinned) or ``mismatch``."""

    digest: str
    pinned: str | None

    @property
    def state(self) -> DigestState:
        if self.pinned is None:
            return "missing"
        return "ok" if self.pinned == self.digest else "mismatch"

    @property
    def problem(self) -> str | None:
        """The one sentence every caller reports for a mismatch (None otherwise)."""
        if self.state != "mismatch":
            return None
        return (f"starting tree digest {self.digest} does not match the pinned fixture_digest "
                f"{self.pinned}")


def check_starting_tree(bundle: Bundle, tree: Path | None = None) -> DigestCheck:
    """Digest ``tree`` (an exported starting tree), or a fresh export when None, against the
    bundle's pin: one place for the check the trial, the verifier, ``task check`` and ``task
    lint`` all make."""
    if tree is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="assay-digest-") as tmp:
            bundle.export_starting_tree(Path(tmp) / "t")
            digest = tree_digest(Path(tmp) / "t")
    else:
        digest = tree_digest(tree)
    return DigestCheck(digest, bundle.spec.initial_state.fixture_digest)


def load_bundle(root: Path) -> Bundle:
    root = Path(root)
    path = root / TASK_FILE
    if not path.is_file():
        raise SuiteError.one(path, "task.yaml not found: not a task bundle")
    outside = path_problem(root, TASK_FILE, at=path, line=None, field=None)
    if outside is not None:
        raise SuiteError([outside])
    text = read_text(path, limit=limits.TASK_FILE_MAX_BYTES, what="task.yaml")[1]
    data = load_mapping(path, text)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(path, text, exc, model=TaskSpec) from exc
    problems = _outside_problems(root, path, text, spec)
    if problems:  # nothing below may touch a path that leaves the bundle
        raise SuiteError(problems)
    acc = spec.acceptance
    for check in ("behavior", "regression"):
        if check in acc.required and getattr(acc, check) is None:
            problems.append(Problem(path, None, f"acceptance.{check}",
                                    f"required check {check!r} has no command"))
    problems += _instruction_problems(root, path, text, spec.instruction)
    repo = root / spec.initial_state.repository
    if not repo.exists():
        problems.append(Problem(path, None, "initial_state.repository", f"{repo} not found"))
    elif root.resolve().is_relative_to(repo.resolve()):
        problems.append(Problem(path, None, "initial_state.repository",
                                "the starting tree holds the bundle itself (task.yaml, tests/, "
                                "solution/): point it at a folder beside them, such as repo"))
    if "behavior" in acc.required and not (root / "tests").is_dir():
        problems.append(Problem(path, None, "acceptance.behavior",
                                "the bundle has no tests/ folder of hidden tests"))
    if acc.judge is not None:
        problems += _judge_problems(root, path, text, acc.judge,
                                    spec.initial_state.repository)
    if problems:
        raise SuiteError(problems)
    return Bundle(root=root, spec=spec, spec_sha256=hashlib.sha256(text.encode()).hexdigest())


#: the top ``.git`` folder: left out of every artifact, whatever ``ignored_paths`` says
GIT_RULE = ".git/**"


def _globs(patterns: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in patterns)


def rules_section(spec: TaskSpec) -> str:
    """The generated end of every agent's instruction: the rules the verifier applies, which
    live in ``task.yaml`` (never shown to the agent). An agent that adds a regression test under
    a protected folder or a script outside the allowed paths is rejected for a rule it could
    not otherwise know."""
    acc = spec.acceptance
    lines = ["---", "", "## How this work is checked (written by assay)", "",
             "- Hidden tests, which are not in the workspace, judge the work once you finish."]
    if acc.protected_paths:
        lines.append(f"- Protected paths: {_globs(acc.protected_paths)}. Do not change, add or "
                     "delete anything there; any change to them rejects the work.")
    if acc.allowed_paths is not None:
        lines.append(f"- Allowed paths: {_globs(acc.allowed_paths)}. Change files only there; "
                     "a change anywhere else (a new test or script included) rejects the work.")
    lines.append("- Caches, virtual environments, packaging metadata and build output are "
                 "left out of what is checked: use them freely, but the fix must not depend on "
                 "them.")
    return "\n".join(lines) + "\n"


def _instruction_problems(root: Path, path: Path, text: str, written: str) -> list[Problem]:
    """The instruction must be a regular file (a FIFO would block the trial that reads it)
    within its size limit (it becomes the agent's prompt)."""
    from assay.suites.yamlfile import key_lines, line_of

    where = root / written
    line = line_of(key_lines(text), ("instruction",))
    if not where.exists():
        return [Problem(path, line, "instruction", f"{written} not found")]
    if not where.is_file():
        return [Problem(path, line, "instruction", f"{written} is not a regular file")]
    size = where.stat().st_size
    if size > limits.INSTRUCTION_FILE_MAX_BYTES:
        return [Problem(path, line, "instruction", f"{written} is "
                        f"{limits.describe_bytes(size)}, over the "
                        f"{limits.describe_bytes(limits.INSTRUCTION_FILE_MAX_BYTES)} limit "
                        "for an instruction")]
    return []


def _outside_problems(root: Path, path: Path, text: str, spec: TaskSpec) -> list[Problem]:
    """Every path of ``spec`` that leaves the bundle folder, after symbolic links, and every
    link in the starting tree, ``tests/`` and ``solution/`` that points out of it."""
    from assay.suites.yamlfile import key_lines, line_of

    lines = key_lines(text)
    named = [(spec.instruction, ("instruction",)),
             (spec.initial_state.repository, ("initial_state", "repository")),
             ("tests", ("tests",)), ("solution", ("solution",))]
    if spec.acceptance.judge is not None:
        named.append((spec.acceptance.judge.judge, ("acceptance", "judge", "judge")))
    if spec.initial_state.environment.image is not None and not is_reference(
            spec.initial_state.environment.image):  # a registry image is not a path
        named.append((spec.initial_state.environment.image,
                      ("initial_state", "environment", "image")))
    problems = []
    for written, loc in named:
        line = line_of(lines, loc)
        found = path_problem(root, written, at=path, line=line, field=".".join(loc))
        if found is not None:
            problems.append(found)
            continue
        tree = root / written
        if loc[0] in ("tests", "solution") or (
                loc == ("initial_state", "repository")
                and not spec.initial_state.repository_commit):
            if tree.is_dir():
                problems += links_out(root, tree, at=path, line=line, field=".".join(loc))
    return problems


def _judge_problems(root: Path, path: Path, text: str, check: JudgeCheck,
                    repository: str) -> list[Problem]:
    """``acceptance.judge`` against the judge it names: the file loads (its own problems are
    raised as they are, naming the judge's files), lies outside the starting tree (the agent
    would read the rubric there), and the pass rule fits the criterion's scale."""
    from assay.suites.judge_spec import load_judge
    from assay.suites.yamlfile import key_lines, line_of

    lines = key_lines(text)

    def at(*loc: str) -> int | None:
        return line_of(lines, ("acceptance", "judge", *loc))

    where = root / check.judge
    start = (root / repository).resolve()  # both inside the bundle: checked before
    if where.resolve().is_relative_to(start):
        return [Problem(path, at("judge"), "acceptance.judge.judge",
                        "the judge file is inside the starting tree: the agent would read the "
                        "rubric; keep it beside task.yaml")]
    if not where.is_file() and not (where / "judge.yaml").is_file():
        return [Problem(path, at("judge"), "acceptance.judge.judge", f"{where} not found")]
    problems: list[Problem] = []
    judge = load_judge(where, confine=root)
    rule = check.pass_
    crit = judge.criterion(rule.criterion)
    if crit is None:
        problems.append(Problem(path, at("pass", "criterion"), "acceptance.judge.pass.criterion",
                                f"no criterion {rule.criterion!r} in {judge.spec.rubric} "
                                f"(criteria: {', '.join(c.id for c in judge.criteria)})"))
        return problems
    if (rule.at_least is None) == (rule.one_of is None):
        problems.append(Problem(path, at("pass"), "acceptance.judge.pass",
                                "give exactly one of at_least (an integer scale) or one_of "
                                "(labels)"))
    elif rule.at_least is not None:
        if not crit.is_range:
            problems.append(Problem(path, at("pass", "at_least"), "acceptance.judge.pass."
                                    "at_least", f"criterion {crit.id!r} has labels "
                                    f"({crit.describe_scale()}): use one_of"))
        elif crit.normalise(rule.at_least) is None:
            problems.append(Problem(path, at("pass", "at_least"), "acceptance.judge.pass."
                                    "at_least", f"{rule.at_least} is outside the scale of "
                                    f"{crit.id!r} ({crit.describe_scale()})"))
    else:
        bad = [v for v in rule.one_of or [] if crit.normalise(v) is None]
        if bad:
            problems.append(Problem(path, at("pass", "one_of"), "acceptance.judge.pass.one_of",
                                    f"{bad} not in the scale of {crit.id!r} "
                                    f"({crit.describe_scale()})"))
    return problems


def tree_digest(root: Path) -> str:
    """``sha256:`` over the sorted listing; permission bits beyond the executable bit are left
    out because checkouts and copies do not keep them reliably."""
    from assay.records.artifact import list_tree

    h = hashlib.sha256()
    for e in list_tree(root):
        if e["type"] == "dir":
            continue
        exe = "x" if int(e["mode"], 8) & 0o111 else "-"
        content = e.get("sha256") or e.get("target") or ""
        h.update(f"{e['type']}\0{e['path']}\0{exe}\0{content}\n".encode())
    return "sha256:" + h.hexdigest()


def set_fixture_digest(root: Path, digest: str) -> None:
    """Pin ``digest`` in task.yaml by editing its one ``fixture_digest:`` line, or adding one
    under ``initial_state`` (after ``repository_commit`` or ``repository``), so comments, order
    and layout survive; only ever on request (``task lint --write-digest``)."""
    import re

    from assay.records.io import atomic_write_text

    path = root / TASK_FILE
    text = path.read_text(encoding="utf-8")
    new, n = re.subn(r"^(\s*fixture_digest:)[ \t]*[^\s#]*", rf"\g<1> {digest}", text, count=1,
                     flags=re.MULTILINE)
    if n != 1:
        new = _insert_digest_line(path, text, digest)
    atomic_write_text(path, new)


def set_environment_image(root: Path, reference: str) -> None:
    """Pin a registry image in task.yaml (``environment_image: REGISTRY/NAME@sha256:…``) by
    editing its one ``environment_image:`` line, or adding one under ``initial_state`` after
    ``environment``; only on request (``task lint --write-digest``)."""
    import re

    from assay.records.io import atomic_write_text

    path = root / TASK_FILE
    text = path.read_text(encoding="utf-8")
    new, n = re.subn(r"^(\s*environment_image:)[ \t]*[^\s#]*", rf"\g<1> {reference}", text,
                     count=1, flags=re.MULTILINE)
    if n != 1:
        new = _insert_digest_line(path, text, reference, key="environment_image",
                                  after_keys=("repository:", "repository_commit:",
                                              "environment:"))
    atomic_write_text(path, new)


def _insert_digest_line(path: Path, text: str, digest: str, *, key: str = "fixture_digest",
                        after_keys: tuple[str, ...] = ("repository:",
                                                       "repository_commit:")) -> str:
    lines = text.splitlines(keepends=True)
    head = next((i for i, line in enumerate(lines)
                 if line.rstrip("\r\n").split("#", 1)[0].rstrip() == "initial_state:"), None)
    if head is None:
        raise SuiteError.one(path, "initial_state is not a block mapping (one key per line): "
                             f"add '{key}: null' under it, then --write-digest again",
                             field=f"initial_state.{key}")
    children = []
    for i in range(head + 1, len(lines)):
        body = lines[i].split("#", 1)[0]
        if not body.strip():
            continue
        indent = len(body) - len(body.lstrip(" "))
        if indent == 0:
            break
        children.append((i, indent, body.strip()))
    if not children:
        raise SuiteError.one(path, "initial_state has no keys", field="initial_state")
    indent = children[0][1]
    after = head
    for name in after_keys:
        after = next((i for i, ind, b in children if ind == indent and b.startswith(name)),
                     after)
    newline = "\r\n" if lines[after].endswith("\r\n") else "\n"
    if not lines[after].endswith(("\n", "\r")):
        lines[after] += newline
    lines.insert(after + 1, " " * indent + f"{key}: {digest}" + newline)
    return "".join(lines)


def find_bundles(paths: list[Path]) -> list[Path]:
    """Each path is a bundle, or a folder of bundles (one level down)."""
    found: list[Path] = []
    for p in paths:
        if (p / TASK_FILE).is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(c for c in p.iterdir() if (c / TASK_FILE).is_file())
    return found
