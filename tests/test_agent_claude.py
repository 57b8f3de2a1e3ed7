"""The ``claude`` adapter with the real, pinned Claude Code CLI (``@anthropic-ai/claude-code``).

The CLI is installed by ``scripts/agents/claude.sh`` (a subprocess, as CI on a clean clone runs
it): about 25 s with Node 22 already cached, a minute or so from nothing, ~384 MB under
``$ASSAY_AGENTS_DIR`` (default ``~/.cache/assay/agents/claude-code-<version>``), once per
version. The full form is ``bash scripts/agents/claude.sh``; its last line is the executable.
If the registry cannot be reached the tests skip and print why.

Real parts otherwise: builtin/replay as the scripted upstream (or a scripted server answering
errors), the run's gateway with scoped tokens, bubblewrap sandboxes with the model-proxy
network, the real verifier.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "scripts" / "agents" / "claude.sh"
PINNED = "2.1.332"


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    """The pinned CLI, installed through the project's script (cached after the first run)."""
    try:
        proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"claude-code install did not finish: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"claude-code install failed (registry unreachable?): {proc.stderr[-800:]}")
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_file(), proc.stdout
    return path


def test_the_install_script_gives_the_pinned_cli(claude_bin: Path) -> None:
    proc = subprocess.run([str(claude_bin), "--version"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == PINNED
    # a second run installs nothing and names the same executable
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(claude_bin)
