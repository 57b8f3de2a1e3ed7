"""Each arm's ``agent_files`` copied once into the run directory, the copy the sandboxes see.

The copy (``<run>/agent_files/<arm>/<entry>``) is what every attempt of the arm binds read-only
at ``/assay/agent``: a file edited while the run goes on changes nothing in it, and the run
directory keeps the exact files the agent ran with, beside its trials. The copy is checked
against the fingerprints frozen in the identity before any attempt uses it, on the first
session and on every resume (a copy altered in between is refused, never used). Links are
copied as links, never followed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from assay.agents.agent_files import rewrite_command
from assay.errors import RunConflict
from assay.sandbox.userns import readable_by_all
from assay.suites.agent_files import entry_fingerprint
from assay.suites.experiment import Experiment

AGENT_FILES_DIR = "agent_files"


def stage_agent_files(out: Path, exp: Experiment) -> dict[str, Path]:
    """The folder each arm with ``agent_files`` binds at /assay/agent, by arm."""
    staged: dict[str, Path] = {}
    for name, arm in sorted(exp.spec.arms.items()):
        if arm.agent_files is None:
            continue
        want: dict[str, str] = exp.identity["arms"][name]["agent_files"]
        dest = out / AGENT_FILES_DIR / name
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
            try:
                for entry in arm.agent_files:
                    src, dst = exp.path.parent / entry, tmp / entry
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    if src.is_dir():
                        shutil.copytree(src, dst, symlinks=True)
                    else:
                        shutil.copy2(src, dst, follow_symlinks=False)
                readable_by_all(tmp)  # the sandbox's users are not the host's root
                tmp.rename(dest)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        got = {entry: entry_fingerprint(dest, entry) for entry in arm.agent_files}
        if got != want:
            changed = sorted(e for e in want if got.get(e) != want[e])
            raise RunConflict(f"{dest}: the run's copy of arm {name!r}'s agent_files differs "
                              f"from what the experiment froze ({', '.join(changed)}); it is "
                              "never used altered")
        staged[name] = dest
    return staged


def agent_spec_for(exp: Experiment, arm_name: str) -> str:
    """The arm's agent spec as the sandbox runs it: a ``command:`` whose words name the arm's
    files points at their mount (``agents/a.py`` → ``/assay/agent/agents/a.py``)."""
    arm = exp.spec.arms[arm_name]
    if arm.agent_files is None or not arm.agent.startswith("command:"):
        return arm.agent
    return "command:" + rewrite_command(arm.agent.split(":", 1)[1], arm.agent_files)
