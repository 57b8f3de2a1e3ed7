"""Harbor's standard test script, recognised and run with the image's own pytest.

Harbor's task template (and most tasks written from it) verifies with a ``tests/test.sh`` that
installs its tools when it runs: ``apt-get install curl``, then uv from astral.sh, then
``uvx -p 3.13 -w pytest==… -w pytest-json-ctrf==… pytest --ctrf /logs/verifier/ctrf.json
/tests/test_outputs.py``, then a reward of 1 or 0 from pytest's exit status. assay's verifier
has no network, so read as written the script cannot run. Read for what it means, it asks for
pytest and the CTRF plugin next to the task's code: the import installs those into the task's
image (the recipe's pip list, at the versions the script pins) and rewrites the script so that
the installer lines are no-ops and the ``uvx … pytest`` call is the image's ``pytest`` with the
same arguments (plus ``-p ctrf.main`` where it asks for ``--ctrf``: the verifier autoloads no
plugin); the reward lines stay as they are. The verifier runs such a reward script with the
image's own pytest, the version the script pinned (assay.grading.verify.check_run).

Recognition is by structure, not one text: each logical line (continuations joined) is either
an installer (every command in it is ``apt-get``/``apt`` update or install, a download of uv's
installer piped to a shell, ``pip install`` or ``uv pip install``, or sourcing uv's ``env`` file,
with the ``set -o pipefail``/``exit`` glue and ``| tail -n N`` around them) or left alone;
exactly the lines that run ``uvx``/``uv tool run``/``uv run --with`` on ``pytest`` are
rewritten. A script with no such
pytest call is not the standard one and is left untouched, to be judged as before.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from assay.suites.dockerfile import pip_requirements

#: ``uvx [options] pytest`` (or ``uv tool run`` / ``uv run``) at a command position.
_UVX = re.compile(r"(?:(?<=^)|(?<=[\s;&|(!]))(uvx|uv\s+tool\s+run|uv\s+run)\s+"
                  r"((?:(?:-p|--python|-w|--with|--from)(?:\s+|=)\S+\s+"
                  r"|(?:--isolated|--no-project|-q|--quiet|--no-cache|--offline)\s+)*)"
                  r"pytest(?=\s|$|;)")
_OPT = re.compile(r"(-p|--python|-w|--with|--from)(?:\s+|=)(\S+)")
_SEP = re.compile(r"&&|\|\||[;|()]")
_REDIRECT = re.compile(r"\d?>>?\s*/dev/null|\d?>&\d|&>\s*/dev/null")
_PIECES = [
    re.compile(r"^(?:\w+=\S+\s+)*(?:sudo\s+)?apt(?:-get)?\s+(?:-\S+\s+)*"
               r"(?:update|install)(?:\s+\S+)*$"),
    re.compile(r"^(?:curl|wget)\s+.*\bastral\.sh/uv\b.*$"),
    re.compile(r"^(?:sh|bash)(?:\s+-s\b.*)?$"),
    re.compile(r"^(?:source|\.)\s+\"?\$(?:HOME|\{HOME\})/\.(?:local/bin|cargo)/env\"?$"),
    re.compile(r"^(?:python3?\s+-m\s+)?pip3?\s+install\s+\S.*$"),
    re.compile(r"^uv\s+pip\s+install\s+\S.*$"),
    re.compile(r"^export\s+PATH=\"?\$(?:HOME|\{HOME\})/\.(?:local/bin|cargo/bin)[^\s]*$"),
]
_GLUE = re.compile(r"^(?:set\s+-[a-z]+(?:\s+pipefail)?|set\s+-o\s+pipefail|exit(?:\s+\S+)?"
                   r"|(?:tail|head)\s+-n\s*\d+"
                   r"|true|:|rm\s+-[rf]+\s+/var/lib/apt/lists/\*?|apt(?:-get)?\s+clean)$")
#: What every rewritten script needs in the image, whatever it pinned.
BASE_REQUIREMENTS = ("pytest", "pytest-json-ctrf")
#: pytest-json-ctrf's plugin module (its ``pytest11`` entry point), named with ``-p`` where the
#: script asks for ``--ctrf``: the verifier sets ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``.
CTRF_PLUGIN = "ctrf.main"


@dataclass
class StandardScript:
    """A recognised script: its rewritten text, the requirements the image must hold, and
    what was changed (for the import report)."""

    text: str
    requirements: list[str]
    notes: list[str] = field(default_factory=list)
    #: Debian packages the script's installer lines asked for (they go into the image)
    packages: list[str] = field(default_factory=list)


def _logical(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, joined text) of each logical line, 1-based; a comment line
    inside a continuation is dropped, as the author meant."""
    lines = text.split("\n")
    out: list[tuple[int, int, str]] = []
    i = 0
    while i < len(lines):
        start = i
        joined = lines[i]
        while joined.endswith("\\") and i + 1 < len(lines):
            i += 1
            nxt = lines[i]
            if nxt.lstrip().startswith("#") and nxt.rstrip().endswith("\\"):
                continue
            joined = joined[:-1] + " " + nxt.strip()
        out.append((start + 1, i + 1, joined))
        i += 1
    return out


_DEB = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def _installs(line: str) -> tuple[list[str], list[str]] | None:
    """(Debian packages, pip requirements) of an installer line (see the module docstring),
    None when the line is anything else."""
    body = _REDIRECT.sub(" ", line.split(" #", 1)[0]).strip()
    if not body or body.startswith("#"):
        return None
    pieces = [p.strip() for p in _SEP.split(body)]
    real = [p for p in pieces if p and not _GLUE.match(p)]
    if not real or not all(any(r.match(p) for r in _PIECES) for p in real):
        return None
    apt: list[str] = []
    pip: list[str] = []
    for piece in real:
        try:
            words = shlex.split(piece)
        except ValueError:
            return None
        while words and (re.match(r"^\w+=", words[0]) or words[0] == "sudo"):
            words = words[1:]
        if words[:1] in (["apt-get"], ["apt"]) and "install" in words:
            names = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            if not all(_DEB.match(n) for n in names):
                return None
            apt += names
        elif "pip" in piece and "install" in words:
            # uv's --system (install into the interpreter the script finds) is what the
            # image's pip does anyway
            reqs = pip_requirements([w for w in words if w != "--system"])
            if reqs is None:
                return None
            pip += [r for r in reqs if r.split("=")[0] != "uv"]
    return apt, pip


def _requirement(spec: str) -> str:
    return spec.strip("'\"")


def recognise(text: str, label: str = "tests/test.sh") -> StandardScript | None:
    """The rewritten script when ``text`` is Harbor's standard test script, or a script whose
    only network use is installer lines (see the module docstring), else None."""
    lines = _logical(text)
    uvx = any(_UVX.search(joined) for _, _, joined in lines)
    found = [(first, last, joined, _installs(joined)) for first, last, joined in lines]
    if not uvx and not any(inst and (inst[0] or inst[1]) for *_, inst in found):
        return None
    out_lines = text.split("\n")
    requirements: list[str] = []
    packages: list[str] = []
    notes: list[str] = []
    for first, last, joined, inst in found:
        m = _UVX.search(joined)
        if m:
            opts = _OPT.findall(m.group(2))
            for flag, value in opts:
                if flag in ("-w", "--with"):
                    requirements += [_requirement(v) for v in value.split(",") if v]
            python = [v for f, v in opts if f in ("-p", "--python")]
            new = joined[:m.start()] + "pytest" + joined[m.end():]
            notes.append(f"{label}:{first}: {' '.join(m.group(0).split())} -> the image's pytest"
                         + (f" (its python3, not Python {python[0]})" if python else ""))
            out_lines[first - 1:last] = [new] + [""] * (last - first)
        elif inst is not None:
            packages += inst[0]
            requirements += inst[1]
            indent = joined[:len(joined) - len(joined.lstrip())]
            out_lines[first - 1:last] = [f"{indent}:  # assay import-harbor: installed in the "
                                         "image instead; was: "
                                         + shlex.quote(joined.strip())[:160]] + [""] * (
                                             last - first)
            what = " ".join(dict.fromkeys(inst[0] + inst[1]))
            notes.append(f"{label}:{first}: {' '.join(joined.split())[:80]} -> "
                         + (f"{what} installed in the image" if what else "nothing (the image "
                            "needs no installer)"))
    if uvx:
        names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}
        for base in BASE_REQUIREMENTS:
            if base not in names:
                requirements.append(base)
    text_out = "\n".join(out_lines)
    named = name_ctrf_plugin(text_out)
    if named is not None:
        text_out = named
        notes.append(f"{label}: pytest ... --ctrf -> pytest -p {CTRF_PLUGIN} --ctrf (assay's "
                     "verifier loads no pytest plugin the command does not name)")
    return StandardScript(text_out, list(dict.fromkeys(requirements)), notes,
                          list(dict.fromkeys(packages)))


#: ``pytest`` (or ``python3 -m pytest``) at a command position, not already naming the plugin.
_PYTEST_CMD = re.compile(r"(?:(?<=^)|(?<=[\s;&|(!]))pytest(?=\s)(?!\s+-p\s+ctrf\.main)")
_CTRF = re.compile(r"(?<!\S)--ctrf(?=[\s=]|$)")


def name_ctrf_plugin(text: str) -> str | None:
    """``text`` with ``-p ctrf.main`` after ``pytest`` on every line that asks for ``--ctrf``
    (None when no line does). assay's verifier sets ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` (a
    candidate could ship a plugin that passes every test), so pytest-json-ctrf, installed in
    the image, loads only when the command names it; line numbers are kept."""
    lines = text.split("\n")
    changed = False
    for i, line in enumerate(lines):
        if _CTRF.search(line) and not line.lstrip().startswith("#"):
            new = _PYTEST_CMD.sub(f"pytest -p {CTRF_PLUGIN}", line, count=1)
            changed = changed or new != line
            lines[i] = new
    return "\n".join(lines) if changed else None
