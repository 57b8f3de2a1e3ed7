"""The shipped examples (``examples/agent-tasks``) pass ``task check --mutants``.

A file of its own so that the test suite's scheduler (tests/conftest.py) can run it beside
tests/test_trials.py, whose module fixtures it does not use: it is the longest single test.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


def squash(text: str) -> str:
    return "".join(text.split())


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "agent-tasks"


#: The reduced form's plan: every example runs nop and its oracle, and every mutant runs on
#: exactly one example (the cross product, 7 x 24, is the full form), so that each example's
#: verifier meets a few kinds of cheating and each kind meets some example.
#: leaderboard-rank-007 has a solve.sh and no patch: the patch-based mutants do not apply to it.
#: The one that hangs (hang_at_import) runs there, in the image.
EXAMPLE_PLAN: dict[str, tuple[str, ...]] = {
    "leaderboard-rank-007": ("hang_at_import", "shadow_pytest", "pytest_plugin"),
    "duration-parse-001": ("delete_tests", "neuter_tests", "symlink_protected",
                           "oversized_config"),
    "semver-compat-002": ("outside_allowed", "link_outside", "sourceless_bytecode",
                          "metadata_plugin"),
    "slugify-fold-003": ("partial_fix", "twin_aware_noop", "fake_output"),
    "retry-final-004": ("fake_summary_exit", "noop_test_calls", "flip_failed_reports"),
    "ellipsize-width-005": ("shadow_bytecode", "shape_aware_noop", "chmod_tests"),
    "memo-key-006": ("runner_dep_shadow", "no_change", "stdlib_shadow", "canary_collision"),
}


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(900)  # 90 s alone; over 300 s once in CI among eight workers
def test_examples_pass_task_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shipped example passes ``task check --mutants``. Reduced form: every example runs
    ``nop``, its oracle and two or three mutants (``EXAMPLE_PLAN``: every mutant on one example,
    picked with ``--mutant``), on a copy of the examples with their own ``verifier_wall_seconds``
    (60): hang_at_import is judged under a limit set from the oracle's measured time
    (``task_check.hang_limit``), not the task's 60 s twice; the image-pinned example
    (leaderboard-rank-007) is pinned to the image this session's other image tests share (the
    same packages; its own recipe would be one more build of minutes). Full form, every mutant
    on every example as shipped (its image built from its recipe, which reproduces the pinned
    digest): ``.venv/bin/assay task check examples/agent-tasks --mutants --reruns 1 --workers 6
    --out /tmp/check`` (exit 0, every mutant ``rejected:…``)."""
    from support.images import base_image, cache_dir

    from assay.agents import MUTANTS

    assert EXAMPLES.is_dir()
    assert set(EXAMPLE_PLAN) == {p.parent.name for p in EXAMPLES.glob("*/task.yaml")}, \
        "an example left out"
    planned = [m for ms in EXAMPLE_PLAN.values() for m in ms]
    assert sorted(planned) == sorted({m.name for m in MUTANTS}), \
        "every mutant runs on exactly one example: give a new one a place"
    examples = tmp_path / "agent-tasks"
    shutil.copytree(EXAMPLES, examples, symlinks=True)
    store, image = base_image(("python3-sortedcontainers",))
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(cache_dir(store)))
    pinned = examples / "leaderboard-rank-007" / "task.yaml"
    pinned.write_text(re.sub(r"environment_image: \S+", f"environment_image: {image.digest}",
                             pinned.read_text()))
    by_id: dict[str, dict[str, Any]] = {}
    for task, mutants in EXAMPLE_PLAN.items():
        out = tmp_path / f"check-{task}"
        picks = [a for m in mutants for a in ("--mutant", m)]
        res = run_cli(["task", "check", str(examples / task), *picks,
                       "--reruns", "1", "--workers", "6", "--out", str(out)])
        assert res.code == 0, (res.stdout, res.stderr)
        [r] = json.loads((out / "task-check.json").read_text())
        assert r["task"] == task
        assert r["status"] == "ok" and r["digest"] == "ok", r
        assert r["nop"] == "fails behavior" and r["oracle"] == "1/1", r
        # each planned mutant ran (none was silently not applicable) and was rejected
        assert set(r["mutants"]) == set(mutants), r
        assert all(v.startswith("rejected:") for v in r["mutants"].values()), r
        by_id[task] = r
        if task == "leaderboard-rank-007":
            assert f"leaderboard-rank-007:raninimage{image.digest}" in squash(res.stdout)
    assert by_id["leaderboard-rank-007"]["environment_image"]["digest"] == image.digest
    assert by_id["leaderboard-rank-007"]["mutants"]["hang_at_import"] == \
        "rejected:candidate_timeout"
    judged = by_id["leaderboard-rank-007"]["hang_judged"]["hang_at_import"]
    assert judged["task_limit_seconds"] == 60 and judged["limit_seconds"] < 60, judged
