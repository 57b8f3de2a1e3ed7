"""What a Harbor task's ``environment/Dockerfile`` becomes: the bundle's own Dockerfile, built on
its real base, and the starting tree of its workspace.

The Dockerfile is carried over (``assay env build`` pulls its ``FROM`` image and runs its own
steps in it: :mod:`assay.environments.on_base`), so it is read here the way that build reads it
(:func:`assay.suites.dockerfile.translate_dockerfile` with ``real_base``): what that build
cannot do (a second stage, ``ADD`` of a URL, ``RUN --mount``, a copy source outside the
context) is a reason the task is unsupported, with that line and reason alone. With
``approximate`` (``import-harbor --approximate-base``) the Debian translation is read too, since
it stands in wherever the base cannot be pulled: what it would approximate or refuse is noted.

The image gets everything the Dockerfile copies, wherever it goes (``/data``, ``/opt``,
``/etc``...); the task's workspace is mounted at the image's working directory, so what the
Dockerfile puts *there* (``COPY`` into ``WORKDIR``, ``COPY <<EOF`` heredocs) is also the
bundle's starting tree, the part the agent edits and the verifier freezes.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from assay.errors import InputError, SuiteError
from assay.suites.dockerfile import Translation, translate_dockerfile
from assay.suites.image_ref import qualified
from assay.suites.recipe import CopyStep, PipStep, Recipe, RunStep, WorkdirStep

#: pip distribution names whose import name differs (the rest: lower case, '-' -> '_').
_MODULE_OF = {"scikit-learn": "sklearn", "pyyaml": "yaml", "beautifulsoup4": "bs4",
              "pillow": "PIL", "python-dateutil": "dateutil", "opencv-python": "cv2",
              "opencv-python-headless": "cv2", "attrs": "attr", "pyjwt": "jwt"}
_PIP_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")
#: Requirements that are tools, not modules a task's code imports (import names, as
#: :func:`module_of` gives them: pytest-json-ctrf's module is not ``pytest_json_ctrf``).
_TOOLS = {"uv", "pip", "setuptools", "wheel", "pytest_json_ctrf"}


@dataclass
class Copy:
    """One file or folder of the build context, and where the image puts it (absolute)."""

    source: Path
    dest: str
    into_dir: bool  # dest is a directory the source (or its contents) goes into


@dataclass
class EnvironmentPlan:
    """The Dockerfile read: the recipe of the image, the working directory, what lands in it,
    the requirements, and every reason it cannot be built (empty: it can) and every
    approximation made."""

    workdir: str | None = None
    copies: list[Copy] = field(default_factory=list)
    written: list[tuple[str, str, str | None]] = field(default_factory=list)
    mkdirs: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base_image: str | None = None
    #: ``base_image`` with its registry spelled out (what the build pulls), None: unreadable
    base_ref: str | None = None
    #: the Dockerfile's steps as the build on its base runs them; None: it cannot be built
    recipe: Recipe | None = None
    context: Path | None = None

    def relative(self, dest: str) -> str | None:
        """``dest`` relative to the working directory ('' for itself), None when outside."""
        if self.workdir is None:
            return None
        rel = posixpath.relpath(posixpath.normpath(dest), self.workdir)
        if rel == ".":
            return ""
        return None if rel == ".." or rel.startswith("../") else rel


def module_of(spec: str) -> tuple[str, str] | None:
    """(import name, the version part) of a pip requirement, None when it is not one."""
    m = _PIP_SPEC.match(spec.strip())
    if m is None:
        return None
    dist = m.group(1).lower()
    return _MODULE_OF.get(dist, dist.replace("-", "_").replace(".", "_")), m.group(3).strip()


def _from_line(text: str) -> str | None:
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            return rest[0] if rest else None
    return None


def _runs_in_workdir(recipe: Recipe) -> bool:
    """True when a run step runs in the final working directory or names it."""
    cwd = "/"
    for step in recipe.steps:
        if isinstance(step, WorkdirStep):
            cwd = step.workdir
        elif isinstance(step, RunStep) and (cwd == recipe.workdir or re.search(
                rf"{re.escape(recipe.workdir)}(?![\w.-])", step.run)):
            return True
    return False


def _problems(exc: SuiteError, label: str) -> list[str]:
    return [f"{label}:{p.line}: {p.message}" if p.line else f"{label}: {p.message}"
            for p in exc.problems]


def read_dockerfile(path: Path, *, approximate: bool = False) -> EnvironmentPlan:
    """Read ``path`` as the build on its real base reads it; never raises for what it finds,
    only records it (a line that build cannot run is a reason, worded
    ``environment/Dockerfile:<line>: <why>``). ``approximate``: what the Debian translation
    would make of it (where the base cannot be pulled) is added to the notes."""
    plan = EnvironmentPlan()
    label = f"environment/{path.name}"
    try:
        plan.base_image = _from_line(path.read_text(encoding="utf-8", errors="replace"))
        done = translate_dockerfile(path, real_base=True)
    except SuiteError as exc:
        plan.unsupported += _problems(exc, label)
        return plan
    written = done.base_ref or ""
    try:
        plan.base_ref = qualified(written) if written.lower() != "scratch" else None
    except InputError as exc:
        plan.unsupported.append(f"{label}: FROM {written}: not an image reference ({exc})")
        return plan
    if plan.base_ref is None:
        plan.unsupported.append(f"{label}: FROM scratch: no base image to build on")
        return plan
    recipe = done.recipe
    plan.recipe, plan.context = recipe, done.context
    plan.workdir = recipe.workdir
    plan.written = list(done.written)
    plan.notes += [f"{label}: {s}" for s in recipe.substitutions]
    for step in recipe.steps:
        if isinstance(step, CopyStep):
            source = done.context / step.copy_.src
            plan.copies.append(Copy(source, step.copy_.dest, False))
    translated = _translation(path, label, plan, approximate)
    if translated is not None:
        pips = list(translated.recipe.pip) + [r for s in translated.recipe.steps
                                              if isinstance(s, PipStep) for r in s.pip]
        if translated.recipe.python is not None:
            plan.requires.append("python3")
        for spec in pips:
            found = module_of(spec)
            if found and found[0] not in plan.requires and found[0] not in _TOOLS:
                plan.requires.append(found[0])
    if _runs_in_workdir(recipe):
        plan.notes.append(f"{label}: a RUN line works in {recipe.workdir}; what RUN lines "
                          "write there when the image is built is copied from the image into "
                          "each trial's starting tree, beside what the Dockerfile copies there "
                          "(repo/, pinned by fixture_digest)")
    if recipe.user != "root":
        plan.notes.append(f"{label}: USER {recipe.user} recorded; the sandbox runs as its own "
                          "unprivileged uid")
    return plan


def _translation(path: Path, label: str, plan: EnvironmentPlan,
                 approximate: bool) -> Translation | None:
    """The Debian translation of ``path`` (for the modules its ``pip install`` lines name, the
    task's requirements), None when it refuses the file; with ``approximate`` what it
    substitutes or refuses is noted, since it stands in wherever the base cannot be pulled."""
    where = f"where {plan.base_ref} cannot be pulled (--approximate-base)"
    try:
        translated = translate_dockerfile(path)
    except SuiteError as exc:
        if approximate:
            plan.notes += [f"{where}, the Debian translation cannot stand in for it: {p}"
                           for p in _problems(exc, label)]
        return None
    if approximate:  # what it does besides what the build on the base does too
        same = set(plan.recipe.substitutions) if plan.recipe is not None else set()
        plan.notes += [f"{where}, the Debian translation stands in: {label}: {s}"
                       for s in translated.recipe.substitutions if s not in same]
    return translated


@dataclass(frozen=True)
class Additions:
    """What the import adds to a carried-over Dockerfile: the tools ``tests/test.sh`` installed
    when it ran (Debian package names, pip requirements), ``python3`` for the reward reducer,
    and ``[environment].env``."""

    packages: list[str] = field(default_factory=list)
    pip: list[str] = field(default_factory=list)
    python: bool = False
    env: dict[str, str] = field(default_factory=dict)


_ADDED = "# Added by assay task import-harbor"


def _env_value(value: str) -> str:
    """``value`` as one double-quoted word of a Dockerfile ``ENV`` (no expansion)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _install(packages: list[str], alpine: bool) -> str:
    names = " ".join(packages)
    return (f"apk add --no-cache {names}" if alpine else
            f"apt-get update && apt-get install -y --no-install-recommends {names}")


def carried_dockerfile(text: str, plan: EnvironmentPlan, work: str,
                       add: Additions) -> tuple[str, int]:
    """The bundle's Dockerfile: Harbor's ``text`` with its working directory moved to the
    sandbox's ``work`` (every whole-path mention, as in the tests and the instruction: the
    workspace is mounted there), then ``add`` appended in lines a reader can see. The tools
    run as root whatever ``USER`` the file ends with, and install ``python3``/pip first where
    the base has none (its own apt or apk, through the build's proxy); the Debian translation
    reads the same lines as packages and pip requirements. Returns the text and how many
    paths were moved."""
    count = 0
    workdir = plan.workdir
    if workdir and workdir != work:
        pattern = re.compile(rf"(?<![\w.$}}~/-])({re.escape(workdir)})(?![\w.-])")
        text, count = pattern.subn(work, text)
    lines: list[str] = []
    if add.env:
        lines += [f"{_ADDED}: task.toml [environment].env", "ENV " + " ".join(
            f"{k}={_env_value(v)}" for k, v in add.env.items())]
    if add.packages or add.pip or add.python:
        alpine = "alpine" in (plan.base_ref or "")
        lines.append(f"{_ADDED}: what tests/test.sh installed when it ran (assay's verifier "
                     "has no network)")
        user = plan.recipe.user if plan.recipe is not None else "root"
        if user != "root":
            lines.append("USER root")
        if add.pip or add.python:
            probe = "python3 -m pip --version" if add.pip else "command -v python3"
            needed = ["python3", "py3-pip" if alpine else "python3-pip"] if add.pip \
                else ["python3"]
            lines.append(f"RUN {probe} >/dev/null 2>&1 || ({_install(needed, alpine)})")
        if add.packages:
            lines.append(f"RUN {_install(add.packages, alpine)}")
        if add.pip:
            lines.append("RUN python3 -m pip install " + " ".join(
                shlex.quote(r) for r in add.pip))
        if user != "root":
            lines.append(f"USER {user}")
    if lines:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    return text, count
