"""mypy on the whole package (its settings: ``[tool.mypy]`` in pyproject.toml), as a test.

``make lint`` runs mypy itself; ``make test`` runs it here, as one of the suite's parallel
units, so its CPU overlaps the tests that wait on budgets, kills and agents instead of adding
to the wall time before them.

Its incremental cache is kept across runs beside the kept test images (``~/.cache/assay/mypy``,
``$XDG_CACHE_HOME`` if set), as those and the agent CLIs are: a fresh clone (CI's) otherwise
checks all 300-odd modules from nothing, about 20 CPU-seconds, where the kept cache re-checks
only what changed (under a second). mypy validates every cached module against its source's
hash and its own version, so a kept cache gives the verdict a cold run gives; a folder that
cannot be written, or ``ASSAY_TEST_IMAGE_CACHE=session`` (``make test-full``: nothing kept),
leaves mypy its default cache in the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _kept_cache() -> list[str]:
    """``--cache-dir`` of the kept cache, or nothing (mypy's default) when none is kept."""
    if os.environ.get("ASSAY_TEST_IMAGE_CACHE") == "session":
        return []
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "assay" / "mypy"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return []
    return ["--cache-dir", str(folder)]


@pytest.mark.timeout(600)
def test_mypy_is_clean() -> None:
    # mypy is in the dev extra that make test installs: missing, this fails rather than skips
    res = subprocess.run([sys.executable, "-m", "mypy", *_kept_cache()], cwd=ROOT,
                         capture_output=True, text=True, timeout=590)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout, res.stdout
