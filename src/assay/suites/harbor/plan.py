"""Reading one Harbor task folder for ``task import-harbor``: validated, and what of it cannot
run here said with the file, line and instruction.

Problems that stop a conversion (a malformed ``task.toml``, no ``tests/test.sh``, a multi-step
task) raise a :class:`SuiteError`; what only this machine cannot give (a container image, the
network a script downloads its tools over, a GPU) is collected as reasons, so the task is still
converted and marked, and notes record every approximation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from assay.errors import InputError
from assay.suites.errors import Problem, SuiteError
from assay.suites.harbor.docker import Additions, EnvironmentPlan, read_dockerfile
from assay.suites.harbor.reward import AGGREGATES, RewardScan, scan_rewards
from assay.suites.harbor.tests import CTRF_PLUGIN, name_ctrf_plugin, recognise
from assay.suites.harbor.toml import HarborTaskToml, read_task_toml
from assay.suites.image_ref import parse_reference, qualified
from assay.suites.limits import TASK_FILE_MAX_BYTES
from assay.suites.recipe import Recipe
from assay.suites.textfile import read_text

#: How an imported task's image is made (``harbor-import.json``'s ``environment.image_source``):
#: ``pulled``, a prebuilt ``[environment].docker_image`` run as it is; ``on_base``, the task's
#: Dockerfile carried over and built on its ``FROM`` image, pulled (with
#: ``approximate_base``, on the Debian translation where that cannot be pulled).
ImageSource = Literal["pulled", "on_base"]

#: Whether an imported task's environment can run here (``task.yaml``'s
#: ``initial_state.environment.status``): ``unsupported`` with the reasons when it cannot.
ImportStatus = Literal["supported", "unsupported"]

_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_TEMPLATE = re.compile(r"\$\{[^}]*\}")
#: Commands that fetch software or reach a host beyond loopback: the sandbox has no network.
_INSTALLS = re.compile(r"(?<![\w-])(apt-get|apt|apk|yum|dnf)\s+(install|update|add)\b"
                       r"|(?<![\w-])(curl|wget)\s.*https?://(?!localhost|127\.|\[::1\])"
                       r"|(?<![\w/-])(?<!which )(?<!-v )(uvx|npx)(?![\w-])"
                       r"|(?<![\w-])uv\s+(run|pip|tool)"
                       r"|(?<![\w-])pip3?\s+install\b|-m\s+pip\s+install\b"
                       r"|(?<![\w-])npm\s+(install|i|ci)\b")


@dataclass
class HarborPlan:
    """One Harbor task read and validated: what the bundle will hold, and why not all of it
    can run here."""

    source: Path
    task_id: str
    config: HarborTaskToml
    environment: EnvironmentPlan
    unsupported: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    #: the Dockerfile's steps as its build on its base runs them; None when the Dockerfile
    #: cannot be built that way, is missing, or a prebuilt image stands in for it
    recipe: Recipe | None = None
    #: what the import adds to the carried-over Dockerfile (the tests' tools, the env)
    additions: Additions = field(default_factory=Additions)
    #: ``--approximate-base``: the bundle says ``environment.approximate_base: true``
    approximate_base: bool = False
    #: ``tests/test.sh`` rewritten (Harbor's standard script), None: copied as it is
    test_sh: str | None = None
    #: test.sh is as written but for ``-p ctrf.main`` (see name_ctrf_plugin)
    test_sh_named_plugin: bool = False
    reward: RewardScan = field(default_factory=RewardScan)
    reward_key: str | None = None
    reward_aggregate: str | None = None
    #: the registry image the task runs in (``[environment].docker_image``, its registry
    #: spelled out), pulled as it is; None: the Dockerfile's recipe, or nothing
    image_ref: str | None = None

    @property
    def image_source(self) -> ImageSource | None:
        """How the task's image is made (:data:`ImageSource`), None: there is none."""
        if self.image_ref is not None:
            return "pulled"
        return "on_base" if self.recipe is not None else None

    @property
    def reduces_reward(self) -> bool:
        """True when the check must turn a multi-metric reward.json into one reward."""
        return self.reward.multi_metric and (self.reward_key or self.reward_aggregate) is not None

    @property
    def status(self) -> ImportStatus:
        return "unsupported" if self.unsupported else "supported"


def strip_canary(text: str) -> str:
    """Leading canary comment lines (and the blank lines after them) dropped, as Harbor drops
    them before the agent sees the instruction."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    if i:
        while i < len(lines) and not lines[i].strip():
            i += 1
    return "\n".join(lines[i:])


def task_id_of(task_dir: Path, config: HarborTaskToml) -> str:
    """``[task].name`` without its org, else the folder's name; characters an assay id cannot
    hold become ``-``."""
    name = config.task.name if config.task and config.task.name else task_dir.name
    short = name.rsplit("/", 1)[-1]
    return _ID_BAD.sub("-", short).strip("-.") or "task"


def _script_scan(path: Path, label: str, plan: HarborPlan, text: str | None = None) -> None:
    if text is None:
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        m = _INSTALLS.search(body)
        if m:
            plan.unsupported.append(f"{label}:{n}: needs the network when it runs "
                                    f"({body.strip()[:80]}): the sandbox has none")
            break
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for word, need in (("pytest", "pytest"), ("python3", "python3"), ("python", "python")):
        if re.search(rf"(?<![\w.-]){word}(?![\w.-])", code) and need not in plan.requires:
            plan.requires.append(need)


#: A line of a shell script that leaves a process running: ``cmd &`` or ``nohup cmd``.
_BACKGROUND = re.compile(r"(?<![&|])&\s*(?:#.*)?$|(?<![\w-])nohup\s")
#: A test that calls a service on this machine.
_LOCAL_CALL = re.compile(r"(?:127\.0\.0\.1|localhost):(\d{2,5})\b")
#: The test files read for such calls: at most this many, each within TASK_FILE_MAX_BYTES.
_TEST_FILES_SCANNED = 50


def _service_left_running(task_dir: Path, plan: HarborPlan) -> None:
    """A note when ``solve.sh`` leaves a process running and the tests call a local port. In
    Harbor the tests run in the agent's own live container, so a server the solution started
    answers them. assay's verifier runs the tests in a fresh sandbox where nothing the agent
    started runs, so such a check fails unless the tests start the server themselves. This is a
    note, not a blocker: a solution may start a helper for its own use (public tasks do), and
    the tests may start the server."""
    solve = task_dir / "solution" / "solve.sh"
    if not solve.is_file():
        return
    started = next((n for n, line in enumerate(
        read_text(solve, limit=TASK_FILE_MAX_BYTES, what="solution/solve.sh")[1].splitlines(),
        start=1) if not line.lstrip().startswith("#") and _BACKGROUND.search(line)), None)
    if started is None:
        return
    tests = task_dir / "tests"
    files = sorted(p for p in tests.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files[:_TEST_FILES_SCANNED]:
        if path.stat().st_size > TASK_FILE_MAX_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), start=1):
            m = _LOCAL_CALL.search(line)
            if m:
                rel = path.relative_to(task_dir).as_posix()
                plan.notes.append(
                    f"solution/solve.sh:{started} leaves a process running and {rel}:{n} calls "
                    f"{m.group(0)}: assay's verifier runs the tests in a fresh sandbox, where "
                    "nothing the agent or the solution started is running (Harbor runs them in "
                    "the agent's live container); unless the tests start it, the check fails")
                return


def _templated(env: dict[str, str], section: str, plan: HarborPlan) -> None:
    for key, value in env.items():
        if _TEMPLATE.search(value):
            plan.unsupported.append(f"task.toml [{section}].env {key}: reads the host's "
                                    f"variable ({value[:40]}), which the sandbox never passes on")


def _terminal_bench_1(task_dir: Path) -> SuiteError | None:
    if (task_dir / "task.yaml").is_file() and ((task_dir / "run-tests.sh").is_file()
                                               or (task_dir / "solution.sh").is_file()):
        return SuiteError.one(task_dir / "task.yaml", "a Terminal-Bench 1 task (task.yaml, "
                              "run-tests.sh), not a Harbor task: convert it with Harbor's "
                              "`harbor tasks migrate -i <terminal-bench task(s)> -o "
                              "<harbor tasks>` and import the result")
    return None


def _reward_choice(plan: HarborPlan, key: str | None, aggregate: str | None,
                   task_dir: Path) -> list[Problem]:
    """The reward.json decision (see :mod:`assay.suites.harbor.reward`): problems that refuse
    the import, or notes."""
    scan = plan.reward = scan_rewards(task_dir / "tests")
    plan.reward_key, plan.reward_aggregate = key, aggregate
    if not scan.multi_metric:
        if (key or aggregate) and scan.file is None:
            plan.notes.append("--reward-key/--reward-aggregate not used: the tests write one "
                              "reward (reward.txt)")
        elif key or aggregate:
            plan.notes.append(f"--reward-key/--reward-aggregate not used: {scan.file} writes "
                              "reward.json with a 'reward' key")
        return []
    where = task_dir / (scan.file or "tests")
    seen = f" (keys seen there: {', '.join(scan.keys)})" if scan.keys else ""
    if key is None and aggregate is None:
        return [Problem(where, scan.line, None, "writes reward.json without a 'reward' key"
                        f"{seen}: Harbor keeps each key as a metric, an assay check passes on "
                        "one number; import again with --reward-key NAME or "
                        f"--reward-aggregate {'|'.join(AGGREGATES)}")]
    if key is not None and scan.keys and key not in scan.keys:
        return [Problem(where, scan.line, None, f"--reward-key {key}: not a key this file "
                        f"writes into reward.json{seen}")]
    plan.notes.append(f"{scan.file}: reward.json has no 'reward' key; the check's reward is "
                      + (f"its {key!r}" if key is not None else f"the {aggregate} of its "
                         "metrics") + f" ({seen.strip(' ()') or 'keys not seen in the text'})")
    return []


def _additions(plan: HarborPlan, pip: list[str], env: dict[str, str],
               packages: list[str]) -> Additions:
    """What the carried-over Dockerfile gets beside its own lines: the standard script's
    pytest and plugins (and the Debian packages its installer lines named), python3 for the
    reward reducer, ``[environment].env``."""
    return Additions(packages=list(dict.fromkeys(packages)), pip=list(dict.fromkeys(pip)),
                     python=plan.reduces_reward, env=dict(env))


def plan_import(task_dir: Path, *, reward_key: str | None = None,
                reward_aggregate: str | None = None,
                approximate_base: bool = False) -> HarborPlan:
    """Read and validate one Harbor task folder; :class:`SuiteError` names file, line and field
    for every problem that stops it from being converted at all. ``approximate_base``: the
    bundle may build on the Debian translation where its base cannot be pulled."""
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    problems: list[Problem] = []
    if not task_dir.is_dir():
        raise SuiteError.one(task_dir, "not a folder")
    if not toml_path.is_file():
        raise _terminal_bench_1(task_dir) or SuiteError.one(
            toml_path, "task.toml not found: not a Harbor task folder")
    config = read_task_toml(toml_path)
    if config.steps is not None or (task_dir / "steps").is_dir():
        problems.append(Problem(toml_path, None, "steps", "multi-step Harbor tasks cannot be "
                                "converted: an assay task has one instruction and one verdict"))
    if not (task_dir / "instruction.md").is_file():
        problems.append(Problem(task_dir / "instruction.md", None, None, "not found"))
    test_sh = task_dir / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append(Problem(test_sh, None, None,
                                "not found: Harbor's verifier runs tests/test.sh"))
    if problems:
        raise SuiteError(problems)
    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = [p for p in (env_dir / n for n in ("docker-compose.yaml", "docker-compose.yml",
                                                 "compose.yaml", "compose.yml")) if p.is_file()]
    cfg_env = config.environment
    environment = read_dockerfile(dockerfile, approximate=approximate_base) \
        if dockerfile.is_file() else EnvironmentPlan()
    plan = HarborPlan(task_dir.resolve(), task_id_of(task_dir, config), config, environment,
                      approximate_base=approximate_base)
    problems += _reward_choice(plan, reward_key, reward_aggregate, task_dir)
    if problems:
        raise SuiteError(problems)
    if cfg_env.docker_image:
        try:
            plan.image_ref = qualified(cfg_env.docker_image)
        except InputError as exc:
            plan.unsupported.append(f"task.toml [environment].docker_image: {exc}")
        else:
            pinned = parse_reference(plan.image_ref).digest is not None
            plan.notes.append(f"task.toml [environment].docker_image {cfg_env.docker_image}: "
                              f"the task runs in that image, pulled as {plan.image_ref}"
                              + ("" if pinned else " (a tag: `assay task lint` reports it "
                                 "unpinned, --write-digest pins it)"))
    if not dockerfile.is_file() and not cfg_env.docker_image:
        plan.unsupported.append("environment/ has no Dockerfile: nothing says what the task "
                                "runs in")
    if dockerfile.is_file() and plan.image_ref is None:
        plan.unsupported += environment.unsupported
    plan.notes += environment.notes
    plan.requires += environment.requires
    mode = (config.verifier.model_extra or {}).get("environment_mode")
    if mode not in (None, "shared", "same"):
        plan.unsupported.append(f"task.toml [verifier].environment_mode = {mode!r}: Harbor runs "
                                "the tests in a container of their own (tests/Dockerfile) on "
                                "the declared artifacts; assay's verifier runs in the task's "
                                "image on the delivered workspace")
    if cfg_env.gpus:
        plan.unsupported.append(f"task.toml [environment].gpus = {cfg_env.gpus}: no GPU here")
    if cfg_env.mcp_servers:
        plan.unsupported.append("task.toml [environment].mcp_servers: MCP servers are not "
                                "started for assay agents")
    image_env = {k: v for k, v in cfg_env.env.items() if not _TEMPLATE.search(v)}
    _templated(cfg_env.env, "environment", plan)
    _templated(config.verifier.env, "verifier", plan)
    _templated({str(k): str(v) for k, v in (config.solution.get("env") or {}).items()},
               "solution", plan)
    text = read_text(test_sh, limit=TASK_FILE_MAX_BYTES, what="tests/test.sh")[1]
    standard = recognise(text)
    pip: list[str] = []
    packages: list[str] = []
    if standard is not None:
        plan.test_sh, pip, packages = standard.text, standard.requirements, standard.packages
        plan.notes += standard.notes
        plan.notes.append("tests/test.sh installs its tools when it runs: the image holds "
                          + ", ".join([*packages, *pip]) + " instead (the agent sees them too)")
        if plan.image_ref is not None:
            plan.unsupported.append(f"tests/test.sh installs its tools when it runs (no "
                                    f"network in the verifier), and the prebuilt image "
                                    f"{plan.image_ref} cannot be given them here")
        elif plan.environment.recipe is None and not plan.unsupported:
            plan.unsupported.append("tests/test.sh needs its tools in an image, and there is "
                                    "none")
    elif (named := name_ctrf_plugin(text)) is not None:  # pytest --ctrf, as written
        plan.test_sh, plan.test_sh_named_plugin = named, True
        plan.notes.append(f"tests/test.sh: pytest ... --ctrf -> pytest -p {CTRF_PLUGIN} --ctrf "
                          "(assay's verifier loads no pytest plugin the command does not name)")
    _script_scan(test_sh, "tests/test.sh", plan, plan.test_sh)
    _script_scan(task_dir / "solution" / "solve.sh", "solution/solve.sh", plan)
    _service_left_running(task_dir, plan)
    if plan.image_ref is None and environment.recipe is not None:
        plan.recipe = environment.recipe
        plan.additions = _additions(plan, pip, image_env, packages)
    if image_env and plan.recipe is not None:
        plan.notes.append("task.toml [environment].env " + ", ".join(sorted(image_env))
                          + ": set in the image's environment (ENV lines added to the "
                          "Dockerfile)")
    elif image_env and plan.image_ref is not None:
        plan.notes.append("task.toml [environment].env " + ", ".join(sorted(image_env))
                          + ": not carried over (a prebuilt image keeps its own environment)")
    if not (task_dir / "solution" / "solve.sh").is_file():
        plan.notes.append("no solution/solve.sh: task check's oracle has nothing to run")
    for who in ("agent", "verifier"):
        user = getattr(config, who).user
        if user not in (None, "root", 0):
            plan.notes.append(f"[{who}].user {user} not applied (the sandbox runs as uid 1000)")
    if cfg_env.storage_mb or cfg_env.storage:
        plan.notes.append("[environment] storage is not limited by assay's sandbox")
    if cfg_env.allow_internet and cfg_env.network_mode in (None, "public"):
        plan.notes.append("Harbor lets this agent reach the internet; assay's agent reaches "
                          "only the model proxy")
    if config.agent.timeout_sec is None:
        plan.notes.append("[agent].timeout_sec unset: assay's default agent budget applies")
    unknown = config.unknown_keys()
    if unknown:
        plan.notes.append("keys not carried over: " + ", ".join(unknown))
    if compose:  # several containers: that is the one reason, whatever else the files say
        plan.unsupported = [f"environment/{compose[0].name}: several containers (docker "
                            "compose) need a container engine; assay runs one image per task"]
        plan.recipe = None
    return plan
