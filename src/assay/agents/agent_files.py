"""An arm's own files inside the sandbox, and a ``command:`` that names them.

The runner copies an arm's ``agent_files`` (``suites/agent_files.py``) once per run into the run
directory and binds that copy read-only at :data:`AGENT_FILES_MOUNT`. The agent still runs in
the task's workspace (its edits are what gets frozen), so a relative path in the command that
names one of the arm's entries would point into the workspace; :func:`rewrite_command` points it
at the mount instead. The rule, documented in docs/guide/agent-tasks.md: a word of the command
that starts with an entry as written (``agents/my_agent.py``, ``./agents/x.py``, ``agents``), at
the start of the command or after a space, a quote, ``=`` or a shell operator, is that entry
under ``/assay/agent``; everything else of the command is left byte for byte.
"""

from __future__ import annotations

import re

from assay.suites.agent_files import AGENT_FILES_MOUNT

#: what may come before a path word: the start, blanks, quotes, '=', shell operators
_BEFORE = r"(?<![^\s'\"=;&|(])"
_AFTER = r"(?=[/\s'\";&|)]|$)"


def rewrite_command(command: str, entries: list[str]) -> str:
    """``python3 agents/a.py`` → ``python3 /assay/agent/agents/a.py`` for entry ``agents``."""
    for entry in sorted(entries, key=len, reverse=True):
        pattern = _BEFORE + r"(?:\./)?" + re.escape(entry) + _AFTER
        command = re.sub(pattern, f"{AGENT_FILES_MOUNT}/{entry}", command)
    return command


__all__ = ["AGENT_FILES_MOUNT", "rewrite_command"]
