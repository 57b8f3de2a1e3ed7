"""What ``assay exp run`` prints while it runs: a real experiment through the CLI (the cheap
reference agents ``oracle`` and ``nop`` on real bundles in real sandboxes), resumed, and the
line display's folding of fast trials (driven with a stepped clock, since a real run here
cannot finish hundreds of trials a minute).

Priced and unpriced spend with a model behind the gateway is checked in
tests/test_experiment_run.py, on the runs it already makes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.api import TrialDone
from assay.cli.exp_progress import LineProgress, clock_text, spend_text
from assay.sandbox import bwrap_available
from assay.suites.experiment import TrialKey

LINE = re.compile(r"^\[(\d+)/(\d+) (\d+)%\] (\S+) elapsed, ETA (\S+) · (\S+) (\S+) rep (\d+): "
                  r"(\S+)(?: \(\+(\d+) more: [^)]*\))? · (spent [^·]+) · pass rate so far: (.+)$")


def trial_lines(stderr: str) -> list[re.Match[str]]:
    lines = [line for line in stderr.splitlines() if line.startswith("[")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    return [m for m in matches if m is not None]


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_exp_run_lines_show_elapsed_eta_spend_and_pass_rates(tmp_path: Path) -> None:
    for i in range(2):
        make_bundle(tmp_path / "tasks" / f"t{i}", task_id=f"t{i}")
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: progress\ntasks: [tasks]\nrepetitions: 2\nconcurrency: 2\n"
                   "arms:\n  base: {agent: nop}\n  cand: {agent: oracle}\n"
                   "limits:\n  total_cost_usd: 5\n")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    assert "experiment: 8 trials planned, 0 already done" in res.stderr
    lines = trial_lines(res.stderr)
    assert 1 <= len(lines) <= 8  # one a trial at most (fast ones may be folded)
    last = lines[-1]
    assert (last[1], last[2], last[3], last[5]) == ("8", "8", "100", "0s")
    assert [int(m[1]) for m in lines] == sorted(int(m[1]) for m in lines)
    assert all(m[2] == "8" for m in lines)
    # nothing here calls a model: spent is a known zero against the cap, never "unknown"
    assert all(m[11].strip() == "spent $0.0000 of the $5 cap (0%)" for m in lines)
    assert last[12] == "base 0% (0/4), cand 100% (4/4)"
    assert len(lines) + sum(int(m[10] or 0) for m in lines) == 8  # every trial, once
    for m in lines:
        assert m[9] == ("accepted" if m[7] == "cand" else "rejected:no_change")
        assert m[5] == "unknown" or re.fullmatch(r"\d+(s|m\d\ds|h\d\dm)", m[5])
        assert re.fullmatch(r"\d+(s|m\d\ds|h\d\dm)", m[4])

    # the same command again: everything is done, no trial line, and the count says so
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    assert "experiment: 8 trials planned, 8 already done" in res.stderr
    assert trial_lines(res.stderr) == []


def test_fast_trials_are_folded_never_hundreds_of_lines_a_minute() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = LineProgress(write=lines.append, clock=lambda: now[0], min_gap=1.0)
    spent = [0.0]
    progress.watch_spend(lambda: (spent[0], True), 2.0)
    progress.start(600, 0)
    for i in range(600):  # 600 trials in one minute
        now[0] = i * 0.1
        spent[0] += 0.001
        arm = "a" if i % 2 else "b"
        outcome = "accepted" if arm == "a" else ("rejected:tests_failed" if i % 3 else
                                                 "infra_error (will retry)")
        progress.advance(TrialDone(TrialKey(f"t{i}", arm, 0), outcome))
    progress.finish()
    trial = [line for line in lines if line.startswith("[")]
    assert len(trial) <= 61  # at most one a second, plus the last trial's
    # the first trial is to be retried: not done, no pace yet to estimate from
    assert trial[0].startswith("[0/600 0%] 0s elapsed, ETA unknown · t0 b rep 0: infra_error")
    assert trial[-1].startswith("[500/600 83%] 1m00s elapsed, ETA 12s")
    assert "(+" in trial[5] and "more: " in trial[5]
    folded = sum(int(m) for m in re.findall(r"\(\+(\d+) more", "\n".join(trial)))
    assert folded + len(trial) == 600  # every trial is in a line, by itself or folded
    assert "spent $0.6000 of the $2 cap (30%)" in trial[-1]
    assert trial[-1].endswith("pass rate so far: a 100% (300/300), b 0% (0/200)")


def test_spend_is_never_a_made_up_zero() -> None:
    assert spend_text(0.0, True, None) == "spent $0.0000 so far"
    assert spend_text(1.25, True, 5.0) == "spent $1.2500 of the $5 cap (25%)"
    assert spend_text(0.0, False, 5.0, ["qwen-local"]) == \
        "spent unknown (no price for qwen-local) of the $5 cap"
    assert spend_text(0.5, False, None, ["m1", "m2"]) == \
        "spent at least $0.5000 (no price for m1, m2) so far"
    assert spend_text(0.0, False, None) == "spent unknown (some calls have no price) so far"
    assert [clock_text(s) for s in (0, 59.4, 61, 3599, 3600 * 5 + 61)] == [
        "0s", "59s", "1m01s", "59m59s", "5h01m"]
