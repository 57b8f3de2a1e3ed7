"""What a Harbor task's ``environment/Dockerfile`` becomes: a Debian recipe for the task's image,
and the starting tree of its workspace.

The Dockerfile is translated by :mod:`assay.suites.dockerfile` (the common subset; every line
outside it is a reason the task is unsupported, with that line and reason alone). The image
gets everything the Dockerfile copies, wherever it goes (``/data``, ``/opt``, ``/etc``...);
the task's workspace is mounted at the image's working directory, so what the Dockerfile puts
*there* (``COPY`` into ``WORKDIR``, ``COPY <<EOF`` heredocs) is also the bundle's starting tree,
the part the agent edits and the verifier freezes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from assay.errors import SuiteError
from assay.suites.dockerfile import translate_dockerfile
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


def read_dockerfile(path: Path) -> EnvironmentPlan:
    """Translate ``path`` into a plan; never raises for what it finds, only records it (a line
    outside the subset is a reason, worded ``environment/Dockerfile:<line>: <why>``)."""
    plan = EnvironmentPlan()
    label = f"environment/{path.name}"
    try:
        plan.base_image = _from_line(path.read_text(encoding="utf-8", errors="replace"))
        done = translate_dockerfile(path)
    except SuiteError as exc:
        plan.unsupported += [f"{label}:{p.line}: {p.message}" if p.line else
                             f"{label}: {p.message}" for p in exc.problems]
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
    pips = list(recipe.pip) + [r for s in recipe.steps if isinstance(s, PipStep) for r in s.pip]
    if recipe.python is not None:
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
