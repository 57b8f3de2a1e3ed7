"""The lines long commands write while they run (``cli/check_progress.py``): ``task check``'s
line per finished trial, and the step lines of ``exp report`` on a large run, which stay silent
for a quick one. A clock is passed in so the pacing is exact; the real commands' lines are held
in tests/test_trials.py (``task check``) and tests/test_browser_reports.py (``exp report``'s
steps on a real run)."""

from __future__ import annotations

from assay.cli.check_progress import QUIET_SECONDS, legend, progress_line, step_writer, timed
from assay.runner.task_check import CheckProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_task_check_line_names_how_far_the_bundle_the_mutant_and_what_it_said() -> None:
    line = progress_line(CheckProgress(6, 24, "duration-parse-001", "mutant:fake_output",
                                       "rejected:behavior_failed", 12.4))
    assert line == ("[6/24] 12s, ETA 37s · duration-parse-001 · mutant fake_output: "
                    "rejected:behavior_failed")
    last = progress_line(CheckProgress(24, 24, "t", "oracle", "accepted", 61))
    assert last == "[24/24] 1m01s, done · t · oracle: accepted"


def test_the_legend_says_what_the_figures_mean() -> None:
    text = " ".join(legend(3, True))
    assert "oracle N/3: the task's reference solution (solution/) was accepted in N of 3" in text
    assert "3/3 is ok, fewer is flaky, 0 is broken" in text
    assert "one accepted is a defect in the grader" in text
    assert not any("mutants" in line for line in legend(3, False))


def test_steps_are_silent_for_a_quick_command_then_paced_with_an_eta() -> None:
    clock, lines = Clock(), []
    told = step_writer("exp report", lines.append, clock)
    told("comparing 3000 trials")
    for i in range(1, 11):
        clock.now += 0.1
        told(f"trial pages {i}/3000")
    assert lines == [], "a command under the quiet time says nothing"
    clock.now = 100.0 + QUIET_SECONDS + 0.5
    told("trial pages 11/3000")
    assert len(lines) == 1
    # 10 pages in 2.4 s since the first count (page 1 at 0.1 s): 2989 more take 717 s
    assert lines[0] == "exp report: trial pages 11/3000 · 2s, ETA 11m57s\n", lines
    clock.now += 1.0
    told("trial pages 12/3000")
    assert len(lines) == 1, "at most a line every QUIET_SECONDS"
    clock.now += QUIET_SECONDS
    told("report.html")
    assert lines[-1] == "exp report: report.html · 6s\n"  # 5.5 s, rounded


def test_an_image_build_line_carries_the_time_since_the_start() -> None:
    clock, lines = Clock(), []
    told = timed(lines.append, clock)
    told("step 1/3 apt: python3-six")
    clock.now += 65
    told("step 2/3 run: make")
    assert lines == ["    0s step 1/3 apt: python3-six", " 1m05s step 2/3 run: make"]
