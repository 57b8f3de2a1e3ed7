"""Dockerfiles in the common subset, translated into Debian recipes (:mod:`assay.suites.recipe`).

A team's tasks already say what they run in with a Dockerfile; assay builds images without a
container engine, from Debian's archive. So a Dockerfile is read, never run by Docker: its base
image becomes a Debian suite (with what was approximated said in ``substitutions``, word for
word, because a task that silently runs somewhere else fails for reasons nobody can see), its
``apt-get install`` lines become Debian packages (a line without ``--no-install-recommends``
an ``apt`` step with ``recommends: true``, since Docker's apt installs Recommends there), its
``pip install`` lines pip requirements,
and its other ``RUN``, ``COPY``, ``ENV``, ``WORKDIR`` and ``USER`` lines ordered recipe steps.
What cannot be reproduced that way (a second stage, ``ADD`` of a URL, ``RUN --mount``, an
Alpine base, an instruction outside the subset) is refused with the file, the line and why, all
such lines in one :class:`SuiteError`.

No maintained parser fits: ``dockerfile-parse`` (PyPI) reads neither heredocs nor the line of a
continued instruction reliably, so the tokenizer is here: physical lines are joined on a
trailing backslash as Docker joins them (no space added, comment lines inside dropped), heredoc
bodies (``RUN <<EOF``, ``COPY <<EOF /path``) are taken verbatim up to their delimiter, and
words are split, unquoted and ``${VAR}``-expanded the way Docker's own word processor does for
the instructions it expands (``FROM``, ``COPY``, ``ADD``, ``ENV``, ``ARG``, ``WORKDIR``,
``USER``). ``RUN`` text is left to the shell, with the build arguments it names exported
before it, since that is where Docker puts them.

Copy semantics in the recipe this writes: ``dest`` is always absolute; a directory source
fills ``dest`` with its contents (Docker's rule), a file source is written at ``dest`` exactly
(a destination that names a directory is resolved here to ``dir/<name>``).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from assay.suites.errors import Problem, SuiteError
from assay.suites.limits import DOCKERFILE_MAX_BYTES
from assay.suites.recipe import DEFAULT_SUITE, Recipe
from assay.suites.textfile import read_text

#: Debian suites the builder can take from deb.debian.org, and their python3.
DEBIAN_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13", "forky": "3.13",
                 "sid": "3.13", "testing": "3.13", "unstable": "3.13", "stable": "3.13"}
_DEBIAN_RELEASES = {"11": "bullseye", "12": "bookworm", "13": "trixie", "14": "forky"}
_DEBIAN_ALIASES = {"latest": "stable", "stable": "stable", "testing": "testing",
                   "unstable": "unstable", "sid": "sid"}
#: What a ``python:3.x`` image (not ``-slim``) and ``buildpack-deps`` carry beyond Debian's
#: base: the build tools and fetchers tasks on those images take for granted.
_FULL_EXTRAS = ["build-essential", "ca-certificates", "curl", "git", "procps", "wget"]
#: The packages that stand for a Python image's interpreter: ``python`` and ``pip`` commands,
#: ``venv``.
_PYTHON_PACKAGES = ["python3", "python3-pip", "python3-venv", "python-is-python3"]
#: Python images install into the system interpreter; Debian's marks it externally managed,
#: which these two variables lift for pip and uv, as the images' own behaviour.
_PYTHON_ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "UV_BREAK_SYSTEM_PACKAGES": "1"}

#: The environment every Debian-based base image starts with, for ``$PATH`` in ``ENV``.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

#: Instructions that change nothing in the filesystem and nothing assay runs (it starts every
#: process itself): read and dropped. ``ENTRYPOINT`` and ``CMD`` are dropped too, and said in
#: ``substitutions`` unless they only idle (``sleep infinity``, a shell): a service they start
#: is not running in the task.
_DROPPED = {"LABEL", "MAINTAINER", "EXPOSE", "STOPSIGNAL", "VOLUME"}
_WHY_NOT = {
    "ONBUILD": "ONBUILD acts on another Dockerfile's build",
    "HEALTHCHECK": "a health check of a running container service; assay runs no service",
}
_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_APT_FLAGS = {"-y", "--yes", "--assume-yes", "-q", "-qq", "-qy", "-yq", "-yqq", "-qqy",
              "--quiet", "--no-install-recommends", "--install-recommends",
              "--no-install-suggests", "--fix-missing", "-f", "--fix-broken"}
_APT_DROPPED = {"update", "clean", "autoclean", "autoremove", "upgrade", "dist-upgrade"}
_APT_CACHES = ("/var/lib/apt/lists", "/var/cache/apt", "/var/cache/debconf")
_PIP_FLAGS = {"--no-cache-dir", "-U", "--upgrade", "--break-system-packages", "-q", "--quiet",
              "--no-warn-script-location", "--disable-pip-version-check", "--system",
              "--root-user-action=ignore", "--progress-bar=off", "--no-compile",
              "--prefer-binary", "--upgrade-strategy=only-if-needed"}
_DEB_PACKAGE = re.compile(r"^([a-z0-9][a-z0-9+.-]+)(=[A-Za-z0-9.+~:-]+)?$")


@dataclass
class Heredoc:
    """One ``<<NAME`` body: its text (each line with its newline), whether the delimiter was
    quoted (no expansion) and whether leading tabs are stripped (``<<-``)."""

    name: str
    body: str
    quoted: bool
    strip_tabs: bool


@dataclass
class Instruction:
    """One instruction: the line it starts on, its keyword, its argument text (continuations
    joined) and its heredocs."""

    line: int
    keyword: str
    text: str
    heredocs: list[Heredoc] = field(default_factory=list)


def _mask_quotes(text: str) -> str:
    """``text`` with every character inside quotes (and every backslash-escaped character)
    replaced by ``_``, same length, so operators and markers are found outside quotes only."""
    out = list(text)
    quote: str | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote is None:
            if c == "\\" and i + 1 < len(text):
                out[i + 1] = "_"
                i += 2
                continue
            if c in "'\"":
                quote = c
        elif c == quote:
            quote = None
        else:
            if quote == '"' and c == "\\" and i + 1 < len(text):
                out[i] = out[i + 1] = "_"
                i += 2
                continue
            out[i] = "_"
        i += 1
    return "".join(out)


def parse_instructions(path: Path, text: str) -> list[Instruction]:
    """The instructions of ``text`` with their first line (see the module docstring); an
    unclosed heredoc or an ``escape`` directive other than backslash is a :class:`SuiteError`
    at its line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[Instruction] = []
    i = 0
    directives = True
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if directives:
            m = re.match(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", stripped)
            if m and m.group(1).lower() == "escape" and m.group(2) != "\\":
                raise SuiteError.one(path, f"parser directive escape={m.group(2)}: only the "
                                     "backslash escape is in the subset", line=i + 1)
            if not m:
                directives = False
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        directives = False
        start = i + 1
        joined = raw.lstrip()
        while joined.rstrip().endswith("\\") and i + 1 < len(lines):
            joined = joined.rstrip()[:-1]
            i += 1
            while i < len(lines) and (lines[i].lstrip().startswith("#")
                                      or not lines[i].strip()) and i + 1 < len(lines):
                i += 1  # comment and empty lines inside a continuation are dropped
            if lines[i].lstrip().startswith("#") or not lines[i].strip():
                break
            joined += lines[i]
        if joined.rstrip().endswith("\\"):
            joined = joined.rstrip()[:-1]
        i += 1
        keyword, _, rest = joined.strip().partition(" ")
        keyword = keyword.split("\t", 1)[0].upper()
        rest = joined.strip()[len(keyword):].strip()
        ins = Instruction(start, keyword, rest)
        if keyword in ("RUN", "COPY", "ADD"):
            masked = _mask_quotes(rest)
            for m in _HEREDOC.finditer(rest):
                if masked[m.start()] != "<" or rest[max(0, m.start() - 1):m.start()] == "<":
                    continue  # inside quotes, or a <<< here-string
                dash, quote, name = m.group(1), m.group(2), m.group(3)
                body: list[str] = []
                while True:
                    if i >= len(lines):
                        raise SuiteError.one(path, f"the heredoc <<{name} opened here is never "
                                             f"closed by a line {name}", line=start)
                    line = lines[i]
                    i += 1
                    if (line.lstrip("\t") if dash else line) == name:
                        break
                    body.append(line + "\n")
                ins.heredocs.append(Heredoc(name, "".join(body), bool(quote), bool(dash)))
        out.append(ins)
    return out


# --- words and variables, as Docker's word processor treats them --------------------------

class _Refused(Exception):
    """One line outside the subset; becomes a :class:`Problem` at the instruction's line."""


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+])([^}]*))?\}"
                  r"|([A-Za-z_][A-Za-z0-9_]*))")


def _expand(text: str, env: dict[str, str]) -> str:
    """``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME:+word}`` (and without the colon)
    replaced from ``env`` (unset: empty); other ``${...}`` forms are refused."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        op, word = m.group(2), m.group(3) or ""
        value = env.get(name)
        if op is None:
            return value or ""
        if op in (":-", "-"):
            unset = value is None or (op == ":-" and value == "")
            return _expand(word, env) if unset else (value or "")
        present = value is not None and (op == "+" or value != "")
        return _expand(word, env) if present else ""

    bad = re.search(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*(?::?[-+][^}]*)?\})[^}]*\}?", text)
    if bad:
        raise _Refused(f"{bad.group(0)}: only ${{NAME}}, ${{NAME:-default}} and "
                       "${NAME:+value} are expanded in the subset")
    return _VAR.sub(one, text)


def _words(text: str, env: dict[str, str]) -> list[str]:
    """Words of ``text``: split on unquoted blanks, quotes removed, backslash escapes applied,
    variables expanded outside single quotes."""
    words: list[str] = []
    cur: list[str] = []
    started = False
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\n":
            if started:
                words.append("".join(cur))
                cur, started = [], False
            i += 1
            continue
        started = True
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i + 1])
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _Refused("an unclosed single quote")
            cur.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            j, part = i + 1, []
            while j < len(text) and text[j] != '"':
                if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in '"\\$':
                    part.append("\\" + text[j + 1] if text[j + 1] == "$" else text[j + 1])
                    j += 2
                    continue
                part.append(text[j])
                j += 1
            if j >= len(text):
                raise _Refused("an unclosed double quote")
            cur.append(_expand_escaped("".join(part), env))
            i = j + 1
        elif c == "$":
            m = re.match(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", text[i:])
            if m is None:
                cur.append("$")
                i += 1
            else:
                cur.append(_expand(m.group(0), env))
                i += len(m.group(0))
        else:
            cur.append(c)
            i += 1
    if started:
        words.append("".join(cur))
    return words


def _expand_escaped(text: str, env: dict[str, str]) -> str:
    """Expansion where ``\\$`` stays a literal dollar."""
    parts = text.split("\\$")
    return "$".join(_expand(p, env) for p in parts)


def _flags(words: list[str], allowed: set[str], keyword: str) -> tuple[dict[str, str],
                                                                      list[str]]:
    """Leading ``--name[=value]`` flags of an instruction, refused unless ``allowed``."""
    flags: dict[str, str] = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        if name not in allowed:
            raise _Refused(f"{keyword} --{name} is not in the subset"
                           + (" (a build-time mount needs BuildKit)" if name == "mount" else "")
                           + (" (it copies from another stage or image)" if name == "from"
                              else ""))
        flags[name] = value
    return flags, words


# --- the base image ---------------------------------------------------------------------------

def _split_ref(ref: str) -> tuple[str, str, str | None]:
    """(repository without registry prefixes of Docker Hub, tag, digest) of an image ref."""
    name, _, digest = ref.partition("@")
    tag = "latest"
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        tag = last.split(":", 1)[1]
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/",
                   "registry-1.docker.io/library/", "public.ecr.aws/docker/library/",
                   "mirror.gcr.io/library/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.lower(), tag, digest or None


def _suite_in(tag: str) -> str | None:
    for part in re.split(r"[-_.]", tag):
        if part in DEBIAN_PYTHON and part not in ("stable", "testing", "unstable", "sid"):
            return part
    return None


@dataclass
class _Base:
    suite: str
    packages: list[str]
    python: str | None
    env: dict[str, str]
    pip: list[str]
    substitutions: list[str]


def _base(ref: str) -> _Base:
    """What a ``FROM`` reference becomes, or :class:`_Refused`."""
    name, tag, digest = _split_ref(ref)
    pinned = f" (the digest {digest} is not reproduced: Debian's archive is)" if digest else ""
    if name == "scratch":
        raise _Refused("FROM scratch: an empty image has no Debian to build on")
    if name == "debian":
        m = re.match(r"^(\d+)(?:\.\d+)*(?:-slim)?$", tag)
        code = tag.removesuffix("-slim").split("-")[0]
        suite = (_DEBIAN_RELEASES.get(m.group(1)) if m else
                 _DEBIAN_ALIASES.get(code) or (code if code in DEBIAN_PYTHON else None))
        if suite is None:
            raise _Refused(f"FROM {ref}: Debian {tag} is not in the archive the builder uses "
                           f"(suites: {', '.join(sorted(set(_DEBIAN_RELEASES.values())))}, "
                           "stable, testing, sid)")
        subs = [f"FROM {ref} -> Debian {suite}{pinned}"] if (suite != code or digest) else []
        return _Base(suite, [], None, {}, [], subs)
    if name == "ubuntu":
        numbered = re.match(r"^(\d+)\.(\d+)", tag)
        newer = tag in ("noble", "oracular", "plucky", "questing", "latest", "rolling",
                        "devel") or (numbered is not None and int(numbered.group(1)) >= 24)
        suite = "trixie" if newer else "bookworm"
        return _Base(suite, [], None, {}, [], [f"FROM {ref} -> Debian {suite}{pinned}"])
    if name == "buildpack-deps":
        suite = _suite_in(tag) or DEFAULT_SUITE
        extras = ["ca-certificates", "curl", "wget"] if tag.endswith("-curl") else (
            ["ca-certificates", "curl", "wget", "git", "procps"] if tag.endswith("-scm")
            else _FULL_EXTRAS)
        return _Base(suite, list(extras), None, {}, [],
                     [f"FROM {ref} -> Debian {suite} with {' '.join(extras)}{pinned}"])
    uv = name in ("ghcr.io/astral-sh/uv", "astral/uv")
    if name == "python" or (uv and tag.startswith("python")):
        m = re.match(r"^(?:python)?(3\.\d{1,2})(?:\.\d+)?(?:-(.*))?$", tag)
        if m is None:
            raise _Refused(f"FROM {ref}: name a Python version (python:3.12-slim): the "
                           "Debian python3 it becomes is chosen by it")
        version, variant = m.group(1), m.group(2) or ""
        if "alpine" in variant or "windowsservercore" in variant:
            raise _Refused(f"FROM {ref}: not a Debian-based image")
        suite = _suite_in(variant) or DEFAULT_SUITE
        slim = "slim" in variant or uv
        packages = list(_PYTHON_PACKAGES) + ([] if slim else list(_FULL_EXTRAS))
        have = DEBIAN_PYTHON[suite]
        what = f"Debian {suite}'s python3 {have}"
        if not slim:
            what += " with " + " ".join(_FULL_EXTRAS)
        pip = ["uv"] if uv else []
        if uv:
            what += " and uv from PyPI"
        return _Base(suite, packages, version, dict(_PYTHON_ENV), pip,
                     [f"FROM {ref} -> {what}{pinned}"])
    if name in ("alpine", "busybox", "centos", "fedora", "amazonlinux", "rockylinux",
                "almalinux", "archlinux", "opensuse/leap", "opensuse/tumbleweed",
                "redhat/ubi8", "redhat/ubi9", "oraclelinux", "gentoo/stage3", "clearlinux"):
        raise _Refused(f"FROM {ref}: not a Debian or Python base (only debian, ubuntu, "
                       "python and buildpack-deps bases are in the subset)")
    raise _Refused(f"FROM {ref}: an image the subset cannot rebuild from Debian (only debian, "
                   "ubuntu, python, buildpack-deps and astral-sh/uv python bases)")


# --- RUN ----------------------------------------------------------------------------------------

def _split_and(text: str) -> list[str]:
    """``text`` split at the ``&&`` that sit outside quotes, brackets and substitutions."""
    masked = _mask_quotes(text)
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(masked):
        c = masked[i]
        if c in "({":
            depth += 1
        elif c in ")}":
            depth -= 1
        elif c == "&" and masked[i:i + 2] == "&&" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 2
            i += 2
            continue
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _simple_words(segment: str, env: dict[str, str]) -> list[str] | None:
    """The words of a plain command (no pipes, redirections, substitutions or other
    operators outside quotes), variables from ``env`` expanded; None otherwise."""
    masked = _mask_quotes(segment)
    if re.search(r"[|;<>()`&]", masked):
        return None
    if "$" in masked:
        names = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", masked)
        if any(n not in env for n in names) or re.search(r"\$(?![{A-Za-z_])", masked):
            return None
        try:
            segment = _expand(segment, env)
        except _Refused:
            return None
    try:
        words = shlex.split(segment)
    except ValueError:
        return None
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)  # DEBIAN_FRONTEND=noninteractive apt-get ...
    return words


@dataclass(frozen=True)
class _AptLine:
    """An ``apt-get`` command the recipe can carry: its packages ([] for ``update``,
    ``clean``...) and whether it installs their Recommends (apt's default, and Docker's, unless
    the line says ``--no-install-recommends``)."""

    packages: list[str]
    recommends: bool


def _apt(words: list[str], approximated: bool, subs: list[str],
         line: int) -> _AptLine | None:
    """The ``apt-get`` command ``words``, None when the command is something else or more than
    an install of named packages."""
    if not words or words[0] not in ("apt-get", "apt"):
        return None
    flags = [w for w in words[1:] if w in _APT_FLAGS]
    recommends = "--no-install-recommends" not in flags or (
        "--install-recommends" in flags and flags.index("--install-recommends")
        > flags.index("--no-install-recommends"))
    rest = [w for w in words[1:] if w not in _APT_FLAGS]
    if not rest or rest[0].startswith("-"):
        return None
    if rest[0] in _APT_DROPPED:
        return (_AptLine([], recommends) if len(rest) == 1 or rest[0] == "autoremove"
                else None)
    if rest[0] != "install" or len(rest) < 2:
        return None
    packages = []
    for word in rest[1:]:
        m = _DEB_PACKAGE.match(word)
        if m is None:
            return None
        if m.group(2) and approximated:
            subs.append(f"line {line}: apt-get install {word} -> {m.group(1)} (Debian's "
                        "version: the pin names another distribution's)")
            word = m.group(1)
        packages.append(word)
    return _AptLine(packages, recommends)


def _apt_cleanup(words: list[str]) -> bool:
    """``rm -rf /var/lib/apt/lists/*`` and the like: the image has no apt lists to clean."""
    if not words or words[0] != "rm":
        return False
    paths = [w for w in words[1:] if not w.startswith("-")]
    return bool(paths) and all(posixpath.normpath(p.rstrip("*")).startswith(_APT_CACHES)
                               for p in paths)


def pip_requirements(words: list[str]) -> list[str] | None:
    """Requirements of a plain ``pip install`` of named packages, None when it is more."""
    if words[:1] == ["uv"] and words[1:3] == ["pip", "install"]:
        words = words[1:]
    else:
        while words and (words[0] in ("python", "python3", "-m")
                         or re.match(r"^python3\.\d+$", words[0])):
            words = words[1:]
    if len(words) < 3 or words[0] not in ("pip", "pip3") or words[1] != "install":
        return None
    reqs = []
    for word in words[2:]:
        if word.startswith("-"):
            if word not in _PIP_FLAGS:
                return None
            continue
        try:
            req = Requirement(word)
        except InvalidRequirement:
            return None
        if req.url:
            return None
        reqs.append(word)
    return reqs or None


@dataclass
class _State:
    """What the translation has seen so far."""

    path: Path
    context: Path
    build_args: dict[str, str]
    args: dict[str, str] = field(default_factory=dict)  # ARGs in scope
    env: dict[str, str] = field(default_factory=dict)  # ENV so far
    workdir: str = "/"
    workdir_set: bool = False
    user: str = "root"
    shell: list[str] | None = None
    dirs: set[str] = field(default_factory=lambda: {"/"})
    base: _Base | None = None
    steps: list[dict[str, object]] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    pip: list[str] = field(default_factory=list)
    substitutions: list[str] = field(default_factory=list)
    written: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: Build on the real base (:mod:`assay.environments.on_base`): FROM is kept as written and
    #: RUN lines run as they are, in the base, instead of becoming Debian packages.
    real_base: bool = False
    from_ref: str | None = None

    @property
    def vars(self) -> dict[str, str]:
        base = {**BASE_ENV, **(self.base.env if self.base else {})}
        return {**base, **self.args, **self.env}

    @property
    def settled(self) -> bool:
        """True once a step that packages must not be hoisted past (RUN or COPY) exists."""
        return any("run" in s or "copy" in s for s in self.steps)


def _run(ins: Instruction, st: _State) -> None:
    text = ins.text
    if text.startswith("--"):
        flag = text.split(None, 1)[0].split("=", 1)[0]
        why = {"--mount": " (a build-time mount needs BuildKit; COPY the files instead)",
               "--network": " (the build's network is the package registries only)",
               "--security": " (the build runs unprivileged)"}.get(flag, "")
        raise _Refused(f"RUN {flag} is not in the subset{why}")
    if text.startswith("["):
        try:
            argv = json.loads(text)
        except ValueError:
            raise _Refused("RUN [...] is not a valid JSON array") from None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise _Refused("RUN [...] must be a non-empty JSON array of strings")
        _emit_run(shlex.join(argv), st, raw=True)
        return
    if ins.heredocs:
        head = re.sub(r"\s+", " ", text).strip()
        marker = _HEREDOC.fullmatch(head)
        doc = ins.heredocs[0]
        if marker and len(ins.heredocs) == 1:
            body = doc.body
            if doc.strip_tabs:
                body = "".join(line.lstrip("\t") for line in body.splitlines(True))
            first = body.split("\n", 1)[0]
            if first.startswith("#!") and not re.match(r"^#!\s*/bin/(ba)?sh\b", first):
                interp = first[2:].strip()
                delim = _delimiter(body)
                _emit_run(f"{interp} <<'{delim}'\n{body}{delim}", st)
            else:
                _emit_run(body, st)
            return
        script = text + "\n" + "".join(d.body + d.name + "\n" for d in ins.heredocs)
        _emit_run(script.rstrip("\n"), st)
        return
    if st.real_base:  # the base's own apt, pip and shell run the line, as Docker would
        _emit_run(text, st)
        return
    segments = _split_and(text)
    pending: list[str] = []

    def flush() -> None:
        if pending:
            _emit_run(" && ".join(pending), st)
            pending.clear()

    approximated = bool(st.base and st.base.substitutions and st.base.python is None)
    for seg in segments:
        words = _simple_words(seg, st.vars)
        if words is not None and st.shell is None:
            apt = _apt(words, approximated, st.substitutions, ins.line)
            if apt is not None:
                flush()
                if apt.packages:
                    _add_apt(apt, st)
                continue
            if _apt_cleanup(words):
                continue
            reqs = pip_requirements(words)
            if reqs is not None:
                flush()
                _add_pip(reqs, st)
                continue
        pending.append(seg)
    flush()


def _delimiter(body: str) -> str:
    delim = "ASSAY_EOF"
    while delim in body:
        delim += "_"
    return delim


def _emit_run(text: str, st: _State, *, raw: bool = False) -> None:
    """A run step; the ARGs the text names are exported before it (Docker gives RUN its
    build arguments as environment), and a ``SHELL`` other than ``/bin/sh -c`` wraps it."""
    if st.shell is not None and not raw:
        text = shlex.join([*st.shell, text])
    used = [n for n in st.args if n not in st.env and re.search(
        rf"\$\{{?{re.escape(n)}(?![A-Za-z0-9_])", text)]
    if used:
        text = "".join(f"export {n}={shlex.quote(st.args[n])}\n" for n in used) + text
    st.steps.append({"run": text})


def _add_apt(apt: _AptLine, st: _State) -> None:
    """Packages before any ``RUN`` or ``COPY`` join the base's (``mmdebstrap`` installs them,
    without Recommends), unless the line installs Recommends: then, like every later line, an
    ``apt`` step in its place that says so."""
    if not st.settled and not apt.recommends:
        st.packages += [p for p in apt.packages if p not in st.packages]
    elif apt.recommends:
        st.steps.append({"apt": apt.packages, "recommends": True})
    else:
        st.steps.append({"apt": apt.packages})


def _add_pip(reqs: list[str], st: _State) -> None:
    if not st.settled:
        st.pip += [r for r in reqs if r not in st.pip]
    else:
        st.steps.append({"pip": reqs})


# --- COPY / ADD ---------------------------------------------------------------------------------

_ARCHIVE = re.compile(r"\.(tar|tgz|tbz2?|txz|tar\.(gz|bz2|xz|zst|lz|lzma|Z))$")


def _dest(dest: str, st: _State) -> str:
    return posixpath.normpath(posixpath.join(st.workdir, dest)) if dest else st.workdir


def _copy(ins: Instruction, st: _State) -> None:
    kind = ins.keyword
    try:
        words = _words(ins.text, st.vars) if not ins.text.startswith("[") else None
    except _Refused:
        raise
    if words is None:
        try:
            words = json.loads(ins.text)
        except ValueError:
            raise _Refused(f"{kind} [...] is not a valid JSON array") from None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise _Refused(f"{kind} [...] must be a JSON array of strings")
        words = [_expand(w, st.vars) for w in words]
    uv = _uv_binaries(kind, list(words), ins.line, st)
    if uv:
        return
    flags, paths = _flags(list(words), {"chmod", "chown", "link"}, kind)
    mode = flags.get("chmod")
    if mode is not None and not re.fullmatch(r"0?[0-7]{3,4}", mode):
        raise _Refused(f"{kind} --chmod={mode}: only octal modes are in the subset")
    if mode is not None and len(mode) == 4 and mode[0] != "0":
        st.substitutions.append(f"line {ins.line}: {kind} --chmod={mode} -> 0{mode[1:]} (no "
                                "setuid, setgid or sticky bit in an image)")
        mode = "0" + mode[1:]
    if "chown" in flags:
        st.substitutions.append(f"line {ins.line}: {kind} --chown={flags['chown']} not applied "
                                "(every file belongs to the image's one user)")
    docs = {d.name: d for d in ins.heredocs}
    sources = [p for p in paths[:-1]]
    if len(paths) < 2:
        raise _Refused(f"{kind} needs a source and a destination")
    dest_word = paths[-1]
    many = len(sources) > 1
    if many and not dest_word.endswith("/"):
        raise _Refused(f"{kind} of several sources needs a destination ending in /")
    for src in sources:
        m = re.fullmatch(r"<<-?[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?", src)
        if m and m.group(1) in docs:
            _copy_heredoc(docs[m.group(1)], dest_word, mode, st)
            continue
        if kind == "ADD" and (re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", src)
                              or src.startswith("git@")):
            raise _Refused(f"ADD {src}: a download at build time is not in the subset; fetch "
                           "it into the build context and COPY it")
        if kind == "ADD" and _ARCHIVE.search(src):
            raise _Refused(f"ADD {src}: ADD unpacks a local archive; unpack it into the build "
                           "context and COPY the folder")
        _copy_local(src, dest_word, many, mode, st)


_UV_IMAGE = re.compile(r"^(?:ghcr\.io/astral-sh/uv|astral/uv|docker\.io/astral/uv)"
                       r"(?::(\d+\.\d+(?:\.\d+)?)?[^@\s]*)?(?:@sha256:[0-9a-f]{64})?$")


def _uv_binaries(kind: str, words: list[str], line: int, st: _State) -> bool:
    """``COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /bin/``, the way uv's own
    documentation installs it: the same uv from PyPI instead (its ``uv`` and ``uvx`` land on
    ``PATH``), said in ``substitutions``. True when ``words`` was that."""
    if kind != "COPY" or not words or not words[0].startswith("--from="):
        return False
    ref = words[0].split("=", 1)[1]
    m = _UV_IMAGE.match(ref)
    paths = [w for w in words[1:] if not w.startswith("--")]
    if m is None or len(paths) < 2 or not set(paths[:-1]) <= {"/uv", "/uvx"}:
        return False
    req = f"uv=={m.group(1)}" if m.group(1) else "uv"
    _add_pip([req], st)
    st.substitutions.append(f"line {line}: COPY --from={ref} {' '.join(paths[:-1])} -> {req} "
                            "from PyPI (uv and uvx on PATH)")
    return True


def _copy_heredoc(doc: Heredoc, dest_word: str, mode: str | None, st: _State) -> None:
    body = doc.body
    if doc.strip_tabs:
        body = "".join(line.lstrip("\t") for line in body.splitlines(True))
    if not doc.quoted:
        body = _expand_escaped(body, st.vars)
    dest = _dest(dest_word, st)
    if dest_word.endswith("/") or dest in st.dirs:
        dest = posixpath.join(dest, doc.name)
    st.written.append((dest, body, mode))
    delim = _delimiter(body)
    text = (f"mkdir -p {shlex.quote(posixpath.dirname(dest))} && cat > {shlex.quote(dest)} "
            f"<<'{delim}'\n{body}{delim}")
    if mode is not None:
        text += f"\nchmod {mode} {shlex.quote(dest)}"
    st.steps.append({"run": text})


def _copy_local(src: str, dest_word: str, many: bool, mode: str | None, st: _State) -> None:
    root = st.context.resolve()
    rel = posixpath.normpath(src.lstrip("/")) if src.strip("/") else "."
    if rel == ".." or rel.startswith("../"):
        raise _Refused(f"COPY {src}: outside the build context")
    if any(c in rel for c in "*?["):
        matches = sorted(p for p in root.glob(rel))
        if not matches:
            raise _Refused(f"COPY {src}: no file of the build context matches")
        many = many or len(matches) > 1
    else:
        matches = [root / rel]
    for m in matches:
        resolved = m.resolve()
        if not resolved.is_relative_to(root):
            raise _Refused(f"COPY {src}: leads outside the build context")
        if not m.exists():
            raise _Refused(f"COPY {src}: no such file in the build context {st.context}")
        rel_src = m.relative_to(root).as_posix() if m != root else "."
        dest = _dest(dest_word, st)
        if m.is_dir():
            st.dirs.add(dest)
        elif many or dest_word.endswith("/") or dest in st.dirs:
            st.dirs.add(dest)
            dest = posixpath.join(dest, m.name)
        spec: dict[str, object] = {"src": rel_src, "dest": dest}
        if mode is not None:
            spec["mode"] = mode
        st.steps.append({"copy": spec})


# --- the rest -----------------------------------------------------------------------------------

def _from(ins: Instruction, st: _State) -> None:
    words = _words(ins.text, st.args)
    flags, words = _flags(words, {"platform"}, "FROM")
    if st.base is not None:
        raise _Refused("a second FROM: multi-stage builds are not in the subset (build the "
                       "final stage's files into the context instead)")
    if not words:
        raise _Refused("FROM names no image")
    if len(words) == 3 and words[1].lower() == "as":
        pass  # a stage name with one stage is harmless
    elif len(words) != 1:
        raise _Refused(f"FROM {ins.text}: expected an image, optionally AS a name")
    st.from_ref = words[0]
    st.base = _Base(DEFAULT_SUITE, [], None, {}, [], []) if st.real_base else _base(words[0])
    if flags.get("platform"):
        st.substitutions.append(f"FROM --platform={flags['platform']} -> this machine's "
                                "architecture")
    st.args = {}  # ARGs before FROM end at it (unless redeclared)


def _arg(ins: Instruction, st: _State, global_args: dict[str, str]) -> None:
    for word in _words(ins.text, st.vars if st.base else st.args):
        name, eq, default = word.partition("=")
        if not _NAME.match(name):
            raise _Refused(f"ARG {word}: not a variable name")
        if name in st.build_args:
            value = st.build_args[name]
        elif eq:
            value = default
        elif st.base is not None and name in global_args:
            value = global_args[name]
        else:
            value = ""
        st.args[name] = value
        if st.base is None:
            global_args[name] = value


def _env(ins: Instruction, st: _State) -> None:
    words = _words(ins.text, st.vars)
    if not words:
        raise _Refused("ENV names no variable")
    pairs: dict[str, str] = {}
    if "=" not in words[0]:  # the old ENV NAME value form
        raw = ins.text.split(None, 1)
        pairs[words[0]] = " ".join(_words(raw[1], st.vars)) if len(raw) > 1 else ""
    else:
        for word in words:
            name, eq, value = word.partition("=")
            if not eq:
                raise _Refused(f"ENV {word}: expected NAME=value")
            pairs[name] = value
    for name in pairs:
        if not _NAME.match(name):
            raise _Refused(f"ENV {name}: not a variable name")
    st.env.update(pairs)
    st.steps.append({"env": pairs})


def _shell(ins: Instruction, st: _State) -> None:
    try:
        argv = json.loads(ins.text)
    except ValueError:
        argv = None
    if (not isinstance(argv, list) or len(argv) < 2 or argv[-1] != "-c"
            or not all(isinstance(a, str) for a in argv)
            or posixpath.basename(argv[0]) not in ("sh", "bash", "dash")):
        raise _Refused("SHELL: only a JSON list naming sh or bash and ending in -c is in "
                       "the subset")
    st.shell = None if argv == ["/bin/sh", "-c"] else argv


def _one(ins: Instruction, st: _State, global_args: dict[str, str]) -> None:
    kw = ins.keyword
    if st.base is None and kw not in ("FROM", "ARG"):
        raise _Refused(f"{kw} before FROM")
    if kw == "FROM":
        _from(ins, st)
    elif kw == "ARG":
        _arg(ins, st, global_args)
    elif kw == "RUN":
        _run(ins, st)
    elif kw in ("COPY", "ADD"):
        _copy(ins, st)
    elif kw == "WORKDIR":
        words = _words(ins.text, st.vars)
        if len(words) != 1:
            raise _Refused("WORKDIR takes one path")
        st.workdir = _dest(words[0], st)
        st.workdir_set = True
        st.dirs.add(st.workdir)
        st.steps.append({"workdir": st.workdir})
    elif kw == "ENV":
        _env(ins, st)
    elif kw == "USER":
        words = _words(ins.text, st.vars)
        if len(words) != 1:
            raise _Refused("USER takes one name")
        st.user = words[0]
        st.steps.append({"user": st.user})
    elif kw == "SHELL":
        _shell(ins, st)
    elif kw in ("ENTRYPOINT", "CMD"):
        if not _only_idles(ins.text):
            st.substitutions.append(f"line {ins.line}: {kw} {ins.text[:80]} not run: assay "
                                    "starts every process of a task itself")
    elif kw in _DROPPED:
        return
    elif kw in _WHY_NOT:
        raise _Refused(f"{kw}: {_WHY_NOT[kw]}; not in the subset")
    else:
        raise _Refused(f"{kw}: not a Dockerfile instruction in the subset")


#: Commands a container's ENTRYPOINT or CMD may run only to stay up (or to give a shell): they
#: start nothing a task could depend on, so leaving them out needs no word.
_IDLE: tuple[tuple[str | None, ...], ...] = (
    ("sleep", None), ("tail", "-f", "/dev/null"), ("tail", "-F", "/dev/null"), ("bash",), ("sh",))


def _only_idles(text: str) -> bool:
    """Whether an ENTRYPOINT/CMD (exec or shell form) only idles: ``sleep infinity``, ``tail -f
    /dev/null``, a bare shell, or one of those under ``sh -c``/``bash -c``. Anything else (a
    service started with ``bash -c "service x start && sleep infinity"``, a script) is not
    run here, and the translation says so."""
    try:
        words = json.loads(text) if text.lstrip().startswith("[") else shlex.split(text)
    except (ValueError, TypeError):
        return False
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        return False
    words = [posixpath.basename(words[0]), *words[1:]]
    if len(words) == 3 and words[0] in ("sh", "bash") and words[1] == "-c":
        return _only_idles(words[2])
    return any(len(words) == len(idle)
               and all(i is None or i == w for i, w in zip(idle, words, strict=True))
               for idle in _IDLE)


@dataclass(frozen=True)
class Translation:
    """A Dockerfile read: the recipe, the build context, and the files its ``COPY <<EOF``
    heredocs write (absolute path, text, mode), which the recipe writes with run steps."""

    recipe: Recipe
    context: Path
    written: tuple[tuple[str, str, str | None], ...] = ()
    #: The ``FROM`` image as written (after ``ARG`` expansion).
    base_ref: str | None = None


def dockerfile_recipe(path: Path, *, build_args: dict[str, str] | None = None,
                      ) -> tuple[Recipe, Path]:
    """The :class:`Recipe` a Dockerfile in the subset becomes, and its build context (the
    Dockerfile's folder). Every line outside the subset is a :class:`Problem` of one
    :class:`SuiteError` (file, line, reason); a file over its size limit or not UTF-8 is
    refused before it is parsed."""
    done = translate_dockerfile(path, build_args=build_args)
    return done.recipe, done.context


def translate_dockerfile(path: Path, *, build_args: dict[str, str] | None = None,
                         real_base: bool = False) -> Translation:
    """:func:`dockerfile_recipe` with the heredoc-written files as well (the Harbor import
    places those under the working directory in the starting tree). ``real_base``: the steps
    to run on the ``FROM`` image itself (RUN lines as written, no base approximated); the
    recipe's suite and packages then mean nothing and are left empty."""
    path = Path(path)
    text = read_text(path, limit=DOCKERFILE_MAX_BYTES, what="the Dockerfile")[1]
    st = _State(path, path.parent, dict(build_args or {}), real_base=real_base)
    problems: list[Problem] = []
    global_args: dict[str, str] = {}
    for ins in parse_instructions(path, text):
        try:
            _one(ins, st, global_args)
        except _Refused as exc:
            problems.append(Problem(path, ins.line, None, str(exc)))
            if ins.keyword == "FROM" and st.base is None:
                st.base = _Base(DEFAULT_SUITE, [], None, {}, [], [])  # go on reading
    if st.base is None and not problems:
        problems.append(Problem(path, None, None, "no FROM: nothing says what to build on"))
    if problems:
        raise SuiteError(problems)
    assert st.base is not None
    steps = st.steps
    if any("run" in s for s in steps[: next((i for i, s in enumerate(steps)
                                                if "workdir" in s), len(steps))]):
        steps = [{"workdir": "/"}, *steps]  # Docker's RUN before any WORKDIR runs at /
    substitutions = list(st.base.substitutions) + st.substitutions
    workdir = st.workdir
    if not st.workdir_set or workdir == "/":
        workdir = "/work" if workdir == "/" else workdir
        substitutions.append(f"no WORKDIR other than /: the image's working directory is "
                             f"{workdir} (a workspace cannot be mounted at /)")
    packages = list(dict.fromkeys(st.base.packages + st.packages))
    data = {"suite": st.base.suite, "packages": packages, "python": st.base.python,
            "pip": list(dict.fromkeys(st.base.pip + st.pip)), "steps": steps,
            "env": dict(st.base.env), "workdir": workdir, "user": st.user,
            "substitutions": substitutions}
    try:
        recipe = Recipe.model_validate(data)
    except ValueError as exc:  # a value the recipe model refuses (a package name...)
        raise SuiteError.one(path, f"cannot be a recipe: {exc}") from None
    return Translation(recipe, st.context, tuple(st.written), st.from_ref)
