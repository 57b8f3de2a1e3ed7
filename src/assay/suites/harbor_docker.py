"""What a Harbor task's ``environment/Dockerfile`` asks for, and how much of it this machine can
give without a container engine.

assay's sandbox runs over the host's own ``/usr``; there is no image to build. So the Dockerfile
is read, never run: a plain OS or Python base image is approximated by the host (said in the
notes), ``WORKDIR`` becomes the workspace, ``COPY``/``ADD`` of build-context files into it become
the starting tree, ``pip install`` of named packages becomes ``environment.requires``, and
anything else (another base image, ``apt-get``, a second stage, a copy outside the working
directory...) makes the environment *unsupported*, with the instruction that made it so as the
reason. Being honest about what could not be reproduced is the point: a task that silently runs
in the wrong environment fails for reasons nobody can see.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

#: Base images whose userland the host's approximates well enough for a shell-and-Python task.
_OS_IMAGES = {"debian", "ubuntu", "alpine", "busybox", "buildpack-deps"}
_PYTHON_IMAGES = {"python"}
#: ENV keys that change nothing a task's tests can see (they tune installers and buffering).
_HARMLESS_ENV = {"DEBIAN_FRONTEND", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
                 "PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK", "LANG", "LC_ALL", "TZ",
                 "TERM", "PIP_ROOT_USER_ACTION"}
_IGNORED = {"LABEL", "MAINTAINER", "ARG", "CMD", "ENTRYPOINT", "EXPOSE", "HEALTHCHECK",
            "STOPSIGNAL", "SHELL", "VOLUME", "ONBUILD"}
#: pip distribution names whose import name differs (the rest: lower case, '-' -> '_').
_MODULE_OF = {"scikit-learn": "sklearn", "pyyaml": "yaml", "beautifulsoup4": "bs4",
              "pillow": "PIL", "python-dateutil": "dateutil", "opencv-python": "cv2",
              "opencv-python-headless": "cv2", "attrs": "attr", "pyjwt": "jwt"}
_PIP_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


@dataclass
class Copy:
    """One file or folder of the build context, and where the image puts it (absolute)."""

    source: Path
    dest: str
    into_dir: bool  # dest is a directory the source (or its contents) goes into


@dataclass
class EnvironmentPlan:
    """The Dockerfile read: the working directory, the copies into it, the requirements, and
    every reason it cannot be reproduced here (empty: it can) and every approximation made."""

    workdir: str | None = None
    copies: list[Copy] = field(default_factory=list)
    mkdirs: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base_image: str | None = None

    def relative(self, dest: str) -> str | None:
        """``dest`` relative to the working directory ('' for itself), None when outside."""
        if self.workdir is None:
            return None
        rel = posixpath.relpath(posixpath.normpath(dest), self.workdir)
        if rel == ".":
            return ""
        return None if rel == ".." or rel.startswith("../") else rel


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Instructions with their first line number: continuations joined, comments dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        if not buf:
            start = n
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(part.strip() for part in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(part.strip() for part in buf)))
    return out


def _image_name(ref: str) -> str:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def _args(rest: str) -> list[str] | None:
    """The JSON-array or shell-words form of an instruction's arguments."""
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except ValueError:
            return None
        return [str(v) for v in value] if isinstance(value, list) else None
    try:
        return shlex.split(rest)
    except ValueError:
        return None


def module_of(spec: str) -> tuple[str, str] | None:
    """(import name, the version part) of a pip requirement, None when it is not one."""
    m = _PIP_SPEC.match(spec.strip())
    if m is None:
        return None
    dist = m.group(1).lower()
    return _MODULE_OF.get(dist, dist.replace("-", "_").replace(".", "_")), m.group(3).strip()


def _pip_install(words: list[str], plan: EnvironmentPlan, where: str) -> bool:
    """Map ``pip install a b==1`` onto requirements; False when it is more than that."""
    while words and words[0] in ("python", "python3", "-m"):
        words = words[1:]
    if len(words) < 2 or words[0] not in ("pip", "pip3") or words[1] != "install":
        return False
    pins = []
    for word in words[2:]:
        if word.startswith("-"):
            if word in ("-r", "--requirement", "-e", "--editable", "-i", "--index-url",
                        "--extra-index-url", "-f", "--find-links") or word.startswith(
                            ("--index-url=", "--extra-index-url=", "--requirement=")):
                return False
            continue
        found = module_of(word)
        if found is None or "/" in word or word.startswith("."):
            return False
        module, version = found
        if module not in plan.requires:
            plan.requires.append(module)
        if version:
            pins.append(word)
    if pins:
        plan.notes.append(f"{where}: pins {', '.join(pins)} are not enforced; "
                          "environment.requires names the modules and each trial records the "
                          "version it found")
    return True


def _run(rest: str, plan: EnvironmentPlan, where: str, workdir: str) -> None:
    parts = [p.strip() for p in re.split(r"&&|;", rest) if p.strip()]
    for part in parts:
        words = _args(part)
        if words is not None and _pip_install(list(words), plan, where):
            continue
        if words is None or any(ch in part for ch in "|<>`$(") or rest.lstrip().startswith("<<"):
            plan.unsupported.append(f"{where}: RUN {rest[:120]}: needs a container image")
            return
        if words[:1] == ["mkdir"]:
            dirs = [w for w in words[1:] if not w.startswith("-")]
            plan.mkdirs += [posixpath.normpath(posixpath.join(workdir, d)) for d in dirs]
            continue
        if words[:1] in (["true"], [":"]):
            continue
        plan.unsupported.append(f"{where}: RUN {rest[:120]}: needs a container image")
        return


def _copy(kind: str, rest: str, plan: EnvironmentPlan, where: str, context: Path,
          workdir: str) -> None:
    words = _args(rest)
    if words is None:
        plan.unsupported.append(f"{where}: {kind} {rest[:80]}: cannot be read")
        return
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        plan.unsupported.append(f"{where}: {kind} {rest[:80]}: copies from another image")
        return
    for f in flags:
        if f.startswith(("--chown", "--chmod")):
            plan.notes.append(f"{where}: {f} not applied (the sandbox runs as one user)")
    if len(paths) < 2 or any("$" in p for p in paths):
        plan.unsupported.append(f"{where}: {kind} {rest[:80]}: cannot be resolved here")
        return
    *sources, dest = paths
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    into_dir = dest.endswith("/") or len(sources) > 1
    root = context.resolve()
    for src in sources:
        if kind == "ADD" and (re.match(r"^[a-z]+://", src) or src.endswith(
                (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"))):
            plan.unsupported.append(f"{where}: ADD {src}: a download or an archive to unpack")
            return
        matches = sorted(root.glob(src)) if any(c in src for c in "*?[") else [root / src]
        if not matches:
            plan.unsupported.append(f"{where}: {kind} {src}: no such file in environment/")
            return
        for m in matches:
            resolved = m.resolve()
            if not resolved.is_relative_to(root) or not resolved.exists():
                plan.unsupported.append(f"{where}: {kind} {src}: not in environment/")
                return
            plan.copies.append(Copy(resolved, dest_abs, into_dir or len(matches) > 1
                                    or resolved.is_dir()))


def read_dockerfile(path: Path) -> EnvironmentPlan:
    """Read ``path`` into a plan; never raises for what it finds, only records it."""
    plan = EnvironmentPlan()
    text = path.read_text(encoding="utf-8", errors="replace")
    workdir = "/"
    stages = 0
    name = path.name
    for n, line in logical_lines(text):
        where = f"environment/{name}:{n}"
        kind, _, rest = line.partition(" ")
        kind, rest = kind.upper(), rest.strip()
        if kind == "FROM":
            stages += 1
            words = [w for w in rest.split() if not w.startswith("--")]
            ref = words[0] if words else ""
            image = _image_name(ref)
            plan.base_image = ref
            if stages > 1:
                plan.unsupported.append(f"{where}: FROM {ref}: a multi-stage build needs a "
                                        "container engine")
            elif image in _PYTHON_IMAGES:
                plan.notes.append(f"{where}: FROM {ref} approximated by this machine's python3")
                if "python3" not in plan.requires:
                    plan.requires.insert(0, "python3")
            elif image in _OS_IMAGES:
                plan.notes.append(f"{where}: FROM {ref} approximated by this machine's "
                                  "userland (its /usr, read-only)")
            else:
                plan.unsupported.append(f"{where}: FROM {ref}: needs a container image")
        elif kind == "WORKDIR":
            if "$" in rest:
                plan.unsupported.append(f"{where}: WORKDIR {rest}: cannot be resolved here")
            else:
                workdir = posixpath.normpath(posixpath.join(workdir, rest.strip("\"'")))
                plan.workdir = workdir
        elif kind in ("COPY", "ADD"):
            _copy(kind, rest, plan, where, path.parent, workdir)
        elif kind == "RUN":
            _run(rest, plan, where, workdir)
        elif kind == "ENV":
            keys = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)(?==|\s)", rest)[:1] if "=" not in \
                rest else re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest)
            other = [k for k in keys if k not in _HARMLESS_ENV]
            if other:
                plan.unsupported.append(f"{where}: ENV {', '.join(other)}: assay bundles set "
                                        "no environment variables for the agent")
        elif kind == "USER":
            plan.notes.append(f"{where}: USER {rest} not applied (the sandbox runs as uid 1000)")
        elif kind in _IGNORED:
            if kind in ("EXPOSE", "VOLUME", "ENTRYPOINT"):
                plan.notes.append(f"{where}: {kind} ignored")
        else:
            plan.unsupported.append(f"{where}: {kind}: not understood")
    if stages == 0:
        plan.unsupported.append(f"environment/{name}: no FROM")
    if plan.workdir is None or plan.workdir == "/":
        plan.unsupported.append(f"environment/{name}: no WORKDIR: the task works at the "
                                "image's root, which a sandbox workspace cannot stand in for")
        plan.workdir = None
    else:
        for copy in plan.copies:
            if plan.relative(copy.dest) is None:
                plan.unsupported.append(f"environment/{name}: copies {copy.source.name} to "
                                        f"{copy.dest}, outside the working directory "
                                        f"{plan.workdir}")
        for d in plan.mkdirs:
            if plan.relative(d) is None and not plan.workdir.startswith(d.rstrip("/") + "/"):
                plan.unsupported.append(f"environment/{name}: mkdir {d}: outside the working "
                                        f"directory {plan.workdir}")
    return plan
