"""Verify-stage time per trial: tamper-evident checks next to the same checks run plain.

    .venv/bin/python bench/verifier_overhead.py [--rounds 5] [--tasks examples/agent-tasks]

For each example bundle one oracle trial is run and frozen; then the same frozen artifact is
verified ``--rounds`` times with the task as written (tamper-evident: assay's reporter, random
and derived canaries drawn afresh for every verification, expected ids from trusted code, the
start-up guard) and with a copy whose checks say ``tamper_evident: false`` (the same tests, run
plain: exit code and summary only), interleaved so that drift in machine load hits both sides
equally. The oracle trial's own verification collects the expected ids and validates the derived
canaries on the trusted tree (cached on the host afterwards, keyed by everything they depend on),
so the rounds measure what every later trial of the task pays. Prints a table (with how many
canaries of each kind one verification ran) and the ratio of medians against the target of under
1.3x; exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from assay.agents import parse_agent
from assay.grading.verify.verifier import verify
from assay.runner.trial import run_trial
from assay.suites.bundle import find_bundles, load_bundle

TARGET_RATIO = 1.3


def _plain_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    p = dest / "task.yaml"
    lines = [line.replace("}", ", tamper_evident: false}") if line.strip().startswith(
        ("behavior:", "regression:")) else line for line in p.read_text().splitlines()]
    p.write_text("\n".join(lines) + "\n")
    return dest


def _timed(bundle_dir: Path, trial_dir: Path, revision: str) -> tuple[float, dict[str, int]]:
    """Seconds to verify, and the canaries of each kind the verification ran."""
    bundle = load_bundle(bundle_dir)
    t0 = time.perf_counter()
    grade = verify(bundle, trial_dir, revision=revision, trial_id="bench",
                   execution={"status": "succeeded"})
    elapsed = time.perf_counter() - t0
    if not grade.accepted:
        raise SystemExit(f"{bundle_dir}: oracle not accepted ({grade.failure_code})")
    kinds = {"random": 0, "derived": 0}
    for check in ("behavior", "regression"):
        record = getattr(grade.details, check) or {}
        counts = record.get("tamper_evident", {}).get("canary_counts")
        for k in kinds:
            kinds[k] += (counts or {}).get(k, 0)
    return elapsed, kinds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tasks", type=Path, default=Path("examples/agent-tasks"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="assay-bench-verify-") as tmp:
        root = Path(tmp)
        os.environ["ASSAY_CACHE_DIR"] = str(root / "cache")  # start cold, measure the miss
        te_all: list[float] = []
        plain_all: list[float] = []
        for src in find_bundles([args.tasks]):
            plain_dir = _plain_copy(src, root / f"plain-{src.name}")
            trial_dir = root / f"trial-{src.name}"
            res = run_trial(load_bundle(src), parse_agent("oracle"), trial_dir)
            if res.grade is None or not res.grade.accepted:
                print(f"{src.name}: oracle trial not accepted; skipped", file=sys.stderr)
                continue
            te, plain = [], []
            kinds: dict[str, int] = {}
            for i in range(args.rounds):
                plain.append(_timed(plain_dir, trial_dir, f"plain{i}")[0])
                seconds, kinds = _timed(src, trial_dir, f"te{i}")
                te.append(seconds)
            te_all += te
            plain_all += plain
            rows.append((src.name, statistics.median(plain), statistics.median(te),
                         kinds.get("derived", 0), kinds.get("random", 0)))
    print(f"{'task':<22} {'plain s':>9} {'tamper-evident s':>17} {'ratio':>7} "
          f"{'derived':>8} {'random':>7}")
    for name, p, t, derived, rand in rows:
        print(f"{name:<22} {p:>9.3f} {t:>17.3f} {t / p:>7.2f} {derived:>8} {rand:>7}")
    if not rows:
        print("no task could be measured", file=sys.stderr)
        return 2
    ratio = statistics.median(te_all) / statistics.median(plain_all)
    print(f"{'all (median)':<22} {statistics.median(plain_all):>9.3f} "
          f"{statistics.median(te_all):>17.3f} {ratio:>7.2f}")
    verdict = "PASS" if ratio < TARGET_RATIO else "FAIL"
    print(f"{verdict}: tamper-evident verify stage {ratio:.2f}x plain (target < {TARGET_RATIO}x; "
          "expected ids cached after the first trial of each task)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
