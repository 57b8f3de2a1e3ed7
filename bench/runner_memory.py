"""The experiment runner's memory as trials accumulate: RSS at points of a run of trivial trials.

    PYTHONPATH=src python bench/runner_memory.py [--trials 2000] [--jobs 4] [--tasks 10]
                                                 [--trace]

One experiment of ``--tasks`` tiny bundles (the unittest variant of ``bench/runner_scaling.py``:
the verifier's cheapest real run), two arms of trivial ``command:`` agents (one fixes the bug,
one does nothing), as many repetitions as make ``--trials``, run by the real runner, sandbox
and verifier in this process. Printed at every tenth of the run: trials done, this process's
RSS now and its peak (``ru_maxrss``), and the growth per trial since the first tenth. With
``--trace``, ``tracemalloc`` also says which allocation sites grew between the first tenth and
the end (slower: for finding what is held, not for the figures).

Target (issue 36): the runner holds no per-trial state it no longer needs; peak RSS under
300 MB at 20,000 trials. A trial costs about 0.25 s of wall time on two idle cores at -j 4, so
2,000 trials take about eight minutes and 20,000 most of an hour.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runner_scaling import _bundle  # noqa: E402 - the bench's own sibling

from assay.runner.experiment import run_experiment  # noqa: E402
from assay.runner.progress import TrialDone  # noqa: E402
from assay.suites.bundle import set_fixture_digest, tree_digest  # noqa: E402

#: with --model, each agent asks once through the gateway it was given
_ASK = """import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["ASSAY_MODEL"],
                     "messages": [{"role": "user", "content": "fix add"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
"""


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Meter:
    """A progress display that samples memory at every tenth of the run."""

    def __init__(self, trials: int, trace: bool) -> None:
        self.trials, self.trace = trials, trace
        self.done = 0
        self.marks = {max(1, trials * k // 10) for k in range(1, 11)}
        self.first: tuple[int, float] | None = None
        self.snap: Any = None
        self.t0 = time.monotonic()

    def start(self, total: int, done: int) -> None:
        print(f"{'trials':>7} {'rss MB':>8} {'peak MB':>8} {'KB/trial':>9} {'wall s':>7}")

    def advance(self, item: TrialDone) -> None:
        if item.outcome.startswith(("re-verified", "infra_error")):
            return
        self.done += 1
        if self.done not in self.marks:
            return
        now = rss_mb()
        if self.first is None:
            self.first = (self.done, now)
            if self.trace:
                self.snap = tracemalloc.take_snapshot()
        per = ("" if self.done == self.first[0] else
               f"{1024 * (now - self.first[1]) / (self.done - self.first[0]):.1f}")
        print(f"{self.done:>7} {now:>8.1f} {peak_mb():>8.1f} {per:>9} "
              f"{time.monotonic() - self.t0:>7.0f}", flush=True)

    def note(self, message: str) -> None:
        pass

    def finish(self) -> None:
        if self.trace and self.snap is not None:
            diff = tracemalloc.take_snapshot().compare_to(self.snap, "lineno")
            print("largest growth since the first tenth (tracemalloc):")
            for stat in diff[:15]:
                print(f"  {stat.size_diff / 1024:>9.1f} KB {stat.count_diff:>7} blocks  "
                      f"{stat.traceback[0]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--model", action="store_true",
                    help="each agent asks a builtin/replay model once through the gateway")
    args = ap.parse_args(argv)
    reps = max(1, args.trials // (2 * args.tasks))
    with tempfile.TemporaryDirectory(prefix="assay-memory-") as tmp:
        root = Path(tmp)
        for i in range(args.tasks):
            b = _bundle(root / "tasks" / f"t{i:03d}", "unittest")
            y = b / "task.yaml"
            y.write_text(y.read_text().replace("id: calc-bench", f"id: calc-{i:03d}"))
            if args.model:
                y.write_text(y.read_text().replace(
                    "  environment:", "  network_policy: model-proxy-only\n  environment:"))
                (b / "repo" / "ask.py").write_text(_ASK)
                set_fixture_digest(b, tree_digest(b / "repo"))
        exp = root / "experiment.yaml"
        fix, idle = "sed -i 's/a - b/a + b/' src/calc/__init__.py", "true"
        model = ""
        if args.model:
            fix, idle = f"python3 ask.py; {fix}", "python3 ask.py"
            model = "\n    model: {name: builtin/replay, script: replay.yaml}"
            (root / "replay.yaml").write_text("turns:\n  - message: add\n")
        exp.write_text(f"name: memory\ntasks: [tasks]\nrepetitions: {reps}\nconcurrency: "
                       f"{args.jobs}\narms:\n  fixer:\n    agent: \"command:{fix}\"{model}\n"
                       f"  idle:\n    agent: \"command:{idle}\"{model}\n")
        if args.trace:
            tracemalloc.start(5)
        meter = Meter(reps * 2 * args.tasks, args.trace)
        print(f"{args.tasks} tasks x 2 arms x {reps} repetitions = {meter.trials} trials, "
              f"-j {args.jobs}; RSS before the run {rss_mb():.1f} MB")
        res = run_experiment(exp, root / "run", progress=meter, jobs=args.jobs,
                             allow_large_plan=True)
        print(f"status {res.status}; peak RSS {peak_mb():.1f} MB at {meter.done} trials")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
