"""The agent's workspace as a git repository of one commit.

Agents review their work with ``git status`` and ``git diff``, and some submit with ``git add -A
&& git diff --cached``; in a plain folder those fail ("not a git repository"), and an agent CLI
may refuse to start (Codex needs ``--skip-git-repo-check``). So by default the starting tree is
committed once, before the agent starts: a fresh repository (never the task's own history, so the
agent sees nothing of any other commit), a fixed author, committer and date, so the commit id is
the same for the same tree every time. ``.git`` is never part of the deliverable (the freeze
leaves it out, see ``Bundle.ignored_paths``). A task turns it off with ``initial_state.git:
false``.

Git runs on the host, over the starting tree only (the agent has not run yet), with no user or
system configuration and no hooks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

#: who made the one commit, and when: fixed, so the same tree gives the same commit id
AUTHOR = ("assay", "assay@localhost")
DATE = "2000-01-01T00:00:00+0000"
MESSAGE = "starting tree"
#: what git may spend on a starting tree (a large tree still commits in seconds)
TIMEOUT_SECONDS = 120


def _env(home: Path) -> dict[str, str]:
    name, email = AUTHOR
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": DATE,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": DATE, "LC_ALL": "C"}


def make_repository(workspace: Path, scratch: Path) -> dict[str, Any]:
    """Commit ``workspace`` as the one commit of a new repository (``scratch``: an empty
    folder used as git's HOME). Returns the record: the commit id, or why there is none (no
    git on this machine: the workspace stays a plain folder, and the record says so)."""
    git = shutil.which("git")
    if git is None:
        return {"enabled": True, "commit": None, "why": "git is not installed on this machine"}
    if (workspace / ".git").exists() or (workspace / ".git").is_symlink():
        return {"enabled": True, "commit": None,
                "why": "the starting tree already holds a .git: left as it is"}
    env = _env(scratch)
    # safe.directory: a sandbox may have run in it already (a setup step), and it belongs to
    # the sandbox's user then, not to root (assay.sandbox.userns); git refuses a repository
    # of another owner unless told, and only from the command line or the global config
    base = [git, "-c", "core.hooksPath=" + os.devnull, "-c", "commit.gpgsign=false",
            "-c", "init.defaultBranch=main", "-c", f"safe.directory={workspace}",
            "-C", str(workspace)]
    for args in (["init", "-q", "--template="], ["add", "-A", "-f", "."],
                 ["commit", "-q", "--allow-empty", "--no-verify", "-m", MESSAGE]):
        done = subprocess.run([*base, *args], env=env, capture_output=True,
                              timeout=TIMEOUT_SECONDS, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"git {args[0]} in the starting workspace failed: "
                               + done.stderr.decode(errors="replace").strip()[-500:])
    # the branch's ref file, read rather than asked for: one git process less per trial
    ref = workspace / ".git" / "refs" / "heads" / "main"
    if ref.is_file() and not ref.is_symlink():
        head = ref.read_text(encoding="ascii").strip()
    else:  # another ref storage
        head = subprocess.run([*base, "rev-parse", "HEAD"], env=env, capture_output=True,
                              timeout=TIMEOUT_SECONDS, check=True).stdout.decode().strip()
    return {"enabled": True, "commit": head, "author": AUTHOR[0], "date": DATE}
