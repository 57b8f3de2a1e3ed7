"""Every record a small real experiment writes, compared with the committed golden files.

The run is real (bubblewrap sandboxes, the real verifier, the state database): one task, an
oracle arm and a nop arm, one repetition. Each record is checked twice: its raw bytes are
exactly the writer's format (indentation, key order, a final newline), and its content, with
the clock, the machine and the verifier's random draws masked (``support/golden.py``), equals
``tests/golden/<name>``. A refactor that changes how a record is built (dicts to models, a
field moved, a key renamed or reordered) fails here; one that changes nothing passes.

A record changed on purpose: rewrite the golden files and review their diff:
``ASSAY_WRITE_GOLDEN=1 pytest tests/test_golden_records.py`` (the tests then skip, saying so).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.bundles import make_bundle
from support.golden import golden_text, writer_format_holds

from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("ASSAY_WRITE_GOLDEN") == "1"

EXPERIMENT = """name: golden
tasks: [tasks]
repetitions: 1
seed: 7
concurrency: 2
arms:
  fixes:
    agent: oracle
  idle:
    agent: nop
"""

# golden file name -> (the record in the run directory, the writer's indentation)
RECORDS: dict[str, tuple[str, int]] = {
    "experiment-manifest.json": ("manifest.json", 2),
    "experiment-report.json": ("report.json", 2),
}
for _arm in ("fixes", "idle"):
    _attempt = f"trials/calc-001/{_arm}/0/a1"
    RECORDS[f"trial-{_arm}.json"] = (f"{_attempt}/trial.json", 2)
    RECORDS[f"grade-{_arm}.json"] = (f"{_attempt}/grades/v1.json", 2)
    RECORDS[f"artifact-{_arm}.json"] = (f"{_attempt}/artifact.json", 1)


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import assay

    root = tmp_path_factory.mktemp("golden")
    make_bundle(root / "tasks" / "calc")
    exp = root / "experiment.yaml"
    exp.write_text(EXPERIMENT)
    result = assay.run_experiment(exp, root / "run")
    assert result.status == "complete" and result.counts == {"done": 2}
    # the API's result is the records, typed: the report as its model, read by attribute
    assert result.report is not None and result.report.arms["fixes"].accepted == 1
    assert result.report.arms["idle"].failure_codes == {"no_change": 1}
    assert [t.accepted for t in result.report.trials] == [True, False]
    return root


@needs_bwrap
@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_record_is_written_as_before(run_root: Path, name: str) -> None:
    rel, indent = RECORDS[name]
    path = run_root / "run" / rel
    assert writer_format_holds(path, indent), f"{rel}: not in the writer's format"
    text = golden_text(path, run_root, indent)
    if WRITE:
        (GOLDEN / name).write_text(text, encoding="utf-8")
        pytest.skip(f"ASSAY_WRITE_GOLDEN=1: {name} rewritten; review its diff")
    assert text == (GOLDEN / name).read_text(encoding="utf-8"), (
        f"{rel} differs from tests/golden/{name}")


def test_the_mask_keeps_what_the_inputs_decide() -> None:
    """The comparison must be able to fail: masking hides the clock and the draws, not the
    verdict, the keys or their order."""
    from support.golden import normalize

    a = {"accepted": True, "started_at": "2026-01-01T00:00:00Z", "path": "/r/x",
         "canaries": [1], "seconds": 1.5}
    b = {"accepted": False, "started_at": "2027-01-01T00:00:00Z", "path": "/s/x",
         "canaries": [2], "seconds": 9.0}
    assert normalize(a, "/r") != normalize(b, "/s")
    assert normalize(a, "/r") == normalize({**b, "accepted": True}, "/s")
    assert list(normalize({"b": 1, "a": 2}, "/r")) == ["b", "a"]
