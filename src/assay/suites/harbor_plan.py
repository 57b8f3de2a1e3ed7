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

from assay.suites.errors import Problem, SuiteError
from assay.suites.harbor_docker import EnvironmentPlan, read_dockerfile
from assay.suites.harbor_toml import HarborTaskToml, read_task_toml

_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_TEMPLATE = re.compile(r"\$\{[^}]*\}")
#: Commands that fetch software or reach a host beyond loopback: the sandbox has no network.
_INSTALLS = re.compile(r"(?<![\w-])(apt-get|apt|apk|yum|dnf)\s+(install|update|add)\b"
                       r"|(?<![\w-])(curl|wget)\s.*https?://(?!localhost|127\.|\[::1\])"
                       r"|(?<![\w-])(uvx|npx)(?![\w-])|(?<![\w-])uv\s+(run|pip|tool)"
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

    @property
    def status(self) -> str:
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


def _script_scan(path: Path, label: str, plan: HarborPlan) -> None:
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


def _templated(env: dict[str, str], section: str, plan: HarborPlan) -> None:
    for key, value in env.items():
        if _TEMPLATE.search(value):
            plan.unsupported.append(f"task.toml [{section}].env {key}: reads the host's "
                                    f"variable ({value[:40]}), which the sandbox never passes on")


def plan_import(task_dir: Path) -> HarborPlan:
    """Read and validate one Harbor task folder; :class:`SuiteError` names file, line and field
    for every problem that stops it from being converted at all."""
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    problems: list[Problem] = []
    if not task_dir.is_dir():
        raise SuiteError.one(task_dir, "not a folder")
    if not toml_path.is_file():
        raise SuiteError.one(toml_path, "task.toml not found: not a Harbor task folder")
    config = read_task_toml(toml_path)
    if config.steps is not None or (task_dir / "steps").is_dir():
        problems.append(Problem(toml_path, None, "steps", "multi-step Harbor tasks cannot be "
                                "converted: an assay task has one instruction and one verdict"))
    if not (task_dir / "instruction.md").is_file():
        problems.append(Problem(task_dir / "instruction.md", None, None, "not found"))
    if not (task_dir / "tests" / "test.sh").is_file():
        problems.append(Problem(task_dir / "tests" / "test.sh", None, None,
                                "not found: Harbor's verifier runs tests/test.sh"))
    if problems:
        raise SuiteError(problems)
    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    compose = [p for p in (env_dir / n for n in ("docker-compose.yaml", "docker-compose.yml",
                                                 "compose.yaml", "compose.yml")) if p.is_file()]
    cfg_env = config.environment
    environment = read_dockerfile(dockerfile) if dockerfile.is_file() else EnvironmentPlan()
    plan = HarborPlan(task_dir.resolve(), task_id_of(task_dir, config), config, environment)
    if compose:
        plan.unsupported.append(f"environment/{compose[0].name}: several containers need a "
                                "container engine")
    if cfg_env.docker_image:
        plan.unsupported.append(f"task.toml [environment].docker_image {cfg_env.docker_image}: "
                                "a prebuilt image needs a container engine")
    if not dockerfile.is_file() and not compose and not cfg_env.docker_image:
        plan.unsupported.append("environment/ has no Dockerfile: nothing says what the task "
                                "runs in")
    plan.unsupported += environment.unsupported if dockerfile.is_file() else []
    plan.notes += environment.notes
    plan.requires += environment.requires
    if cfg_env.gpus:
        plan.unsupported.append(f"task.toml [environment].gpus = {cfg_env.gpus}: no GPU here")
    if cfg_env.mcp_servers:
        plan.unsupported.append("task.toml [environment].mcp_servers: MCP servers are not "
                                "started for assay agents")
    if cfg_env.env:
        plan.unsupported.append("task.toml [environment].env "
                                f"{', '.join(sorted(cfg_env.env))}: assay bundles set no "
                                "environment variables for the agent")
    _templated(config.verifier.env, "verifier", plan)
    _templated({str(k): str(v) for k, v in (config.solution.get("env") or {}).items()},
               "solution", plan)
    _script_scan(task_dir / "tests" / "test.sh", "tests/test.sh", plan)
    _script_scan(task_dir / "solution" / "solve.sh", "solution/solve.sh", plan)
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
    return plan


