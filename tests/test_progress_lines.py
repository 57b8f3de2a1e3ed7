"""The lines long commands write while they run (``cli/check_progress.py``): ``task check``'s
line per finished trial, and the step lines of ``exp report`` on a large run, which stay silent
for a quick one. A clock is passed in so the pacing is exact; the real commands' lines are held
in tests/test_trials.py (``task check``) and tests/test_browser_reports.py (``exp report``'s
steps on a real run)."""

from __future__ import annotations

from pathlib import Path

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


def test_a_pull_says_what_has_arrived_then_each_layer_with_the_time_left(tmp_path: Path) -> None:
    """``env pull``'s lines while skopeo copies (``environments/pull_progress.py``), read from
    a real folder as skopeo fills it: silent for a quick pull, then the bytes of the
    manifest's total that arrived, the blobs already whole and an ETA from the pace; without
    sizes, only the bytes so far. Then the unpack's ``layer i/N`` lines gain the time left,
    each layer weighed by its size."""
    from assay.environments.pull_progress import QUIET_SECONDS as QUIET
    from assay.environments.pull_progress import CopyWatch, blob_sizes, unpack_eta

    doc = {"config": {"size": 1024}, "layers": [{"size": 3 << 20}, {"size": 1 << 20}]}
    sizes = blob_sizes(doc)
    assert sizes == [1024, 3 << 20, 1 << 20]
    assert blob_sizes({"config": {"size": 1}, "layers": [{"size": "9"}]}) is None
    folder = tmp_path / "dir"
    clock, lines = Clock(), []
    watch = CopyWatch(folder, sizes, lines.append, clock)
    clock.now += 1
    watch.poll()  # a quick pull says nothing (and the folder is not even made yet)
    assert lines == []
    folder.mkdir()
    (folder / ("a" * 64)).write_bytes(b"c" * 1024)  # the config, whole
    (folder / "dir-put-blob-123").write_bytes(b"l" * (1 << 20))  # a layer, a quarter in
    clock.now += QUIET
    watch.poll()
    total = 1024 + (4 << 20)
    got = 1024 + (1 << 20)
    eta = round(3 / got * (total - got))  # 3 s for got bytes: the rest at the same pace
    assert lines == [f"fetched 1.0 MiB of 4.0 MiB, 1/3 blobs, ETA {eta}s"]
    clock.now += 1
    watch.poll()  # at most a line every QUIET seconds
    assert len(lines) == 1
    blind = CopyWatch(folder, None, lines.append, clock)
    clock.now += QUIET
    blind.poll()
    assert lines[-1] == "fetched 1.0 MiB so far"
    # the unpack: layer 1 of 2 (3 MiB of 4) took 6 s, so 2 s are left
    said: list[str] = []
    told = unpack_eta(said.append, sizes[1:], clock)
    told("registry abc: 2 layers, 4 MiB")
    clock.now += 6
    told("layer 1/2 sha256:aa: 3 MiB read, 9 MiB unpacked")
    told("layer 2/2 sha256:bb: 1 MiB read, 2 MiB unpacked")
    assert said == ["registry abc: 2 layers, 4 MiB",
                    "layer 1/2 sha256:aa: 3 MiB read, 9 MiB unpacked (ETA 2s)",
                    "layer 2/2 sha256:bb: 1 MiB read, 2 MiB unpacked"]


def test_a_long_layer_says_how_much_of_it_was_read_with_the_time_left() -> None:
    """Inside one layer (``oci.unpack_layer``, for ``env pull`` and ``env build`` alike):
    nothing for a quick one, then the compressed bytes read of the layer's size and an ETA."""
    from assay.environments.pull_progress import QUIET_SECONDS as QUIET
    from assay.environments.pull_progress import Ticker

    clock, lines = Clock(), []
    ticker = Ticker("unpacking layer 2/5", 300 << 20, lines.append, clock)
    clock.now += 1
    ticker.tick(50 << 20)
    assert lines == []
    clock.now += QUIET  # 100 MiB in 3 s: 200 MiB more take 6 s
    ticker.tick(100 << 20)
    assert lines == ["unpacking layer 2/5: 100 MiB of 300 MiB read, ETA 6s"]
    ticker.tick(200 << 20)  # too soon for another line
    assert len(lines) == 1
    unsized = Ticker("unpacking layer 1/1", None, lines.append, clock)
    clock.now += QUIET
    unsized.tick(5 << 20)
    assert lines[-1] == "unpacking layer 1/1: 5 MiB read"
