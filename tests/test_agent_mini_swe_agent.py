"""mini-swe-agent, the real pinned CLI (``mini-swe-agent==2.4.6`` from PyPI), end to end.

The CLI is installed by the project's own script, ``scripts/agents/mini-swe-agent.sh``, into its
own venv of the system Python under ``$ASSAY_AGENTS_DIR`` (default ~/.cache/assay/agents),
outside the clone: the first run takes about 45-100 s and ~754 MB (litellm), later runs find the
stamp and install nothing. The full form by hand: ``bash scripts/agents/mini-swe-agent.sh``
prints the path of ``mini`` on its last line. Where the registry cannot be reached the install
fails and every test here that needs the CLI skips, printing why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "scripts" / "agents" / "mini-swe-agent.sh"
PIN = "2.4.6"


@pytest.fixture(scope="module")
def mini_bin() -> Path:
    """The pinned CLI, installed through the project's script (a subprocess, as CI does)."""
    proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        pytest.skip(f"mini-swe-agent {PIN} could not be installed (registry unreachable?): "
                    f"{proc.stderr.strip()[-800:]}")
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.name == "mini" and os.access(path, os.X_OK), proc.stdout
    return path


def test_the_script_installs_the_pin_once_and_mini_runs(mini_bin: Path, tmp_path: Path) -> None:
    prefix = mini_bin.parents[1]
    assert prefix.name == f"mini-swe-agent-{PIN}" and (prefix / ".complete").is_file()
    # the venv is of the system interpreter, which the sandbox sees under /usr
    cfg = (prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg, cfg
    # a second run finds the stamp and prints the same path
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(mini_bin)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MSWEA_CONFIGURED": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([str(mini_bin), "--help"], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert f"mini-swe-agent version {PIN}" in proc.stdout
    assert "--exit-immediately" in proc.stdout and "--task" in proc.stdout
