"""What every real-agent CLI test sets up the same way: the pinned CLI installed through its own
script (skipped with the reason when the registry cannot be reached, as CI on a clean clone
would see it), the fixture task on the model-proxy network, an arm's attempt folder, its trial
record and ledger, and the check that the real key is in no file of a run.

One place, so that the five agent test files cannot drift apart on what "the install failed" or
"no secret anywhere" means; each keeps only what its CLI needs differently.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET

from assay.records.io import iter_rows
from assay.records.ledger import ModelCall
from assay.sandbox import bwrap_available
from support.bundles import make_bundle

ROOT = Path(__file__).resolve().parents[2]
#: where the install scripts are (``scripts/agents/<agent>.sh``)
SCRIPTS = ROOT / "scripts" / "agents"
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


def install_cli(script: Path, what: str) -> Path:
    """Run an install script (a subprocess, as CI does) and return the executable its last line
    names; skip, with the reason, when the install cannot finish."""
    try:
        # one install at a time on this machine: the scripts share the Node 22 prefix and
        # remove a half-done prefix before installing, so two xdist workers (or two sessions)
        # installing at once could remove each other's work; the second finds it done
        agents = Path(os.environ.get("ASSAY_AGENTS_DIR")
                      or Path.home() / ".cache" / "assay" / "agents")
        agents.mkdir(parents=True, exist_ok=True)
        with open(agents / ".install.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                                  timeout=900, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{what} install did not finish (registry unreachable?): {exc}")
    if proc.returncode != 0:
        pytest.skip(f"{what} install failed (registry unreachable?): "
                    f"{proc.stderr.strip()[-800:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def install_fixture(script: Path, what: str) -> Any:
    """A module-scoped fixture (assign it to the name the tests ask for): the pinned CLI,
    installed once per module through its script, an executable file or the tests skip."""

    @pytest.fixture(scope="module")
    def installed() -> Path:
        path = install_cli(script, what)
        assert path.is_file() and os.access(path, os.X_OK), path
        return path

    return installed


#: the agent's wall budget in the fixture task unless a test sets its own: a real CLI (a Node
#: program) that starts, asks and runs the tests needs well under this alone, and may need most
#: of it on a machine whose cores other work (xdist workers, other sessions) also wants; a
#: budget only ends an agent that is still running, so a generous one costs no time
AGENT_SECONDS = 90


def proxy_bundle(root: Path, *, steps: int | None = None, **kw: Any) -> Path:
    """The fixture task (``make_bundle``) with the gateway as its only network and, given
    ``steps``, that many assistant steps instead of 10."""
    kw.setdefault("agent_seconds", AGENT_SECONDS)
    bundle = make_bundle(root, **kw)
    y = bundle / "task.yaml"
    text = y.read_text().replace("network_policy: none", "network_policy: model-proxy-only")
    if steps is not None:
        text = text.replace("assistant_steps: 10", f"assistant_steps: {steps}")
    y.write_text(text)
    return bundle


def attempt_dir(out: Path, arm: str) -> Path:
    """The one attempt of ``calc-001`` an arm ran."""
    [a] = sorted(out.glob(f"trials/calc-001/{arm}/*/a1"))
    return a


def trial_of(out: Path, arm: str) -> tuple[Path, dict[str, Any]]:
    """That attempt's folder and its ``trial.json``."""
    adir = attempt_dir(out, arm)
    return adir, json.loads((adir / "trial.json").read_text())


def ledger(attempt: Path) -> list[ModelCall]:
    """The attempt's model calls as the gateway recorded them."""
    path = attempt / "model_calls.jsonl"
    return [ModelCall.read(r, path) for r in iter_rows(path)]


def assert_no_secret(out: Path) -> None:
    """The real upstream key is in no file below ``out``."""
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


__all__ = ["AGENT_SECONDS", "SCRIPTS", "assert_no_secret", "attempt_dir", "install_cli",
           "install_fixture", "ledger", "needs_bwrap", "proxy_bundle", "trial_of"]
