"""An experiment's arms checked against its tasks before the first trial.

Two misconfigurations used to run to the end and come out as a verdict about the agent: an arm
with a model on a task that gives its sandbox no network (every trial "no change", nothing
spent), and a ``command:`` whose program or script the sandbox cannot see (every trial "no
change", the only clue in ``agent/stderr.log``). Both are refused here, at file:line:field,
naming the arm, the task and the fix; nothing is written before.

The ``command:`` check reads the command's first simple command with ``shlex`` (shell syntax
beyond it is not interpreted): its program, after ``VAR=value`` words and an ``env`` /
``exec`` / ``nice`` prefix, and, for an interpreter (``python3``, ``node``, ``sh``, ...), the
script it is given. A path is looked for where the sandbox will have it: an ``agent_files``
entry beside the experiment file, else the starting tree of every selected task (a task whose
tree is a git commit is not looked into: unknown, so not refused), else, for an absolute path,
the system folders the sandbox shows (not looked into when a selected task runs in its own
image, whose system is not the host's: unknown, so not refused). Every other word that names
one of the arm's ``agent_files`` must exist too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from assay.errors import Problem
from assay.sandbox import DEFAULT_PATH
from assay.suites.experiment import Arm, Experiment, problem_at

#: host folders the agent's sandbox shows as they are (sandbox/bwrap.py)
SANDBOX_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_INTERPRETER = re.compile(r"^(python[0-9.]*|node|nodejs|sh|bash|dash|perl|ruby|Rscript)$")
_PREFIXES = ("env", "exec", "nice", "command")
#: first words that start shell syntax this check does not follow
_SHELL_SYNTAX = {"cd", "if", "for", "while", "until", "case", "{", "(", "!", ".", "source",
                 "set", "export", "true", "false", ":", "eval", "timeout", "time", "trap",
                 "wait", "ulimit", "umask", "unset", "shift", "exit", "return", "local",
                 "readonly", "test", "[", "[[", "alias", "type", "hash", "getopts", "let",
                 "declare", "typeset", "builtin", "function", "select", "read"}
#: interpreter options that take the next word as their value
_OPTION_ARG = {"-X", "-W", "-r", "--require", "--import", "-o", "-O"}
#: interpreter options after which no script file follows
_NO_SCRIPT = {"-c", "-m", "-e", "-p", "--eval", "--print", "-"}


def check_arms(exp: Experiment) -> list[Problem]:
    """Every problem with the arms' models and commands, at the field to fix."""
    problems: list[Problem] = []
    for name, arm in exp.spec.arms.items():
        problems += _network(exp, name, arm)
        if arm.agent.startswith("command:"):
            problems += _command(exp, name, arm)
    return problems


def _network(exp: Experiment, name: str, arm: Arm) -> list[Problem]:
    if arm.model is None:
        return []
    closed = [b for b in exp.bundles.values()
              if b.spec.initial_state.network_policy == "none"]
    if not closed:
        return []
    shown = ", ".join(f"{b.id!r} ({b.root / 'task.yaml'})" for b in closed[:3])
    more = f" and {len(closed) - 3} more" if len(closed) > 3 else ""
    return [problem_at(exp, ("arms", name, "model"),
                       f"arm {name!r} has a model ({arm.model.name}), but task"
                       f"{'s' if len(closed) > 1 else ''} {shown}{more} "
                       f"{'have' if len(closed) > 1 else 'has'} network_policy: none, so its "
                       "agent could never reach it: set `network_policy: model-proxy-only` "
                       "under initial_state in that task.yaml, or leave this arm without a "
                       "model")]


def _command(exp: Experiment, name: str, arm: Arm) -> list[Problem]:
    command = arm.agent.split(":", 1)[1]
    where = ("arms", name, "agent")
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as exc:
        return [problem_at(exp, where, f"the command cannot be read as a shell command: {exc}")]
    entries = arm.agent_files or []
    out: list[str] = []
    for word in words:  # every word naming an agent file must name one that exists
        rel = _relative(word)
        if rel is not None and _covered(rel, entries) and not (exp.path.parent / rel).exists():
            out.append(f"{word}: no such file in agent_files (looked for {exp.path.parent / rel})")
    first = _first_command(words)
    if first:
        program, args = first[0], first[1:]
        problem = _find(exp, name, arm, program, program=True)
        if problem:
            out.append(problem)
        elif _INTERPRETER.match(os.path.basename(program)):
            script = _script_of(args)
            if script is not None:
                problem = _find(exp, name, arm, script, program=False)
                if problem:
                    out.append(problem)
    return [problem_at(exp, where, msg) for msg in dict.fromkeys(out)]


def _first_command(words: list[str]) -> list[str]:
    """The first simple command's words, without assignments and a prefix like ``env``."""
    simple: list[str] = []
    for w in words:
        if w and all(c in "();<>|&" for c in w):
            break
        simple.append(w)
    prefixed = False
    while simple:
        head = simple[0]
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", head) or head in _PREFIXES:
            prefixed = prefixed or head in _PREFIXES
        elif not (prefixed and (head.startswith("-") or head.isdigit())):
            break  # env -i, nice -n 10: the prefix's own options
        simple = simple[1:]
    if not simple or simple[0] in _SHELL_SYNTAX or "$" in simple[0] or "`" in simple[0]:
        return []
    return simple


def _script_of(args: list[str]) -> str | None:
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _NO_SCRIPT:
            return None
        if a in _OPTION_ARG:
            skip = True
            continue
        if a.startswith("-"):
            continue
        return None if "$" in a or "`" in a else a
    return None


def _relative(word: str) -> str | None:
    if "/" not in word or word.startswith("/") or "$" in word or "://" in word:
        return None
    parts = [p for p in Path(word).parts if p != "."]
    return "/".join(parts) if parts and ".." not in parts else None


def _covered(rel: str, entries: list[str]) -> bool:
    return any(rel == e or rel.startswith(e + "/") for e in entries)


def _find(exp: Experiment, name: str, arm: Arm, word: str, *, program: bool) -> str | None:
    """None when the sandbox will have ``word``; else what is wrong and the fix."""
    what = "program" if program else "file"
    if (word.startswith("/") or (program and "/" not in word)) and any(
            b.spec.initial_state.environment.image is not None for b in exp.bundles.values()):
        return None  # a task's own image decides what its system has: unknown here, not refused
    if word.startswith("/"):
        if not any(word == r or word.startswith(r + "/") for r in SANDBOX_SYSTEM):
            return (f"{what} {word} is outside what the agent's sandbox shows (the task's "
                    f"workspace, {', '.join(SANDBOX_SYSTEM[:3])}, ...): list it under this "
                    "arm's agent_files and name it relative to the experiment file")
        return None if os.path.exists(word) else f"{what} {word} does not exist"
    if program and "/" not in word:
        if shutil.which(word, path=DEFAULT_PATH):
            return None
        return f"program {word!r} is not on the sandbox's PATH ({DEFAULT_PATH})"
    rel = _relative(word) or word
    entries = arm.agent_files or []
    beside = exp.path.parent / rel
    if _covered(rel, entries):
        return None if beside.exists() else (f"{what} {word}: no such file in agent_files "
                                            f"(looked for {beside})")
    missing, unknown = [], False
    for b in exp.bundles.values():
        state = b.spec.initial_state
        if state.repository_commit:
            unknown = True
            continue
        if not (b.root / state.repository / rel).exists():
            missing.append(b.id)
    if not missing:
        return None
    top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
    if beside.exists():
        return (f"{what} {word} is beside the experiment file, but the agent runs in the "
                f"task's workspace and cannot see it: add `agent_files: [{top}]` to arm "
                f"{name!r} (copied read-only to /assay/agent, where {word} then resolves)")
    if unknown:
        return None
    tasks = ", ".join(repr(t) for t in missing[:3]) + (
        f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return (f"{what} {word} exists neither in this arm's agent_files nor in the starting tree "
            f"of task {tasks}: put it beside the experiment file and list it in agent_files")
