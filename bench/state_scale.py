"""The state database at experiment scale: 100,000 planned trials (1,000 tasks x 4 arms x 25
repetitions), half of them done, some interrupted, a crash's worth in flight.

    .venv/bin/python bench/state_scale.py [--tasks 1000] [--arms 4] [--reps 25] [--keep DIR]

Measured, each in a fresh process as a user or the runner meets it (so Python's start-up and
the CLI's imports count): ``assay exp status DIR`` (target under 1 s), ``assay exp status DIR
--json`` of every trial (under 3 s, and the output parsed to check every trial is in it), and
the runner's resume start-up: open with the identity and plan check, ``recover()`` and the list
of trials left (under 5 s). Peak RSS of each process is printed; "memory flat" is checked by
running ``--json`` on a database a hundredth the size and requiring the big one to cost under
40 MiB more. Exit status 1 when a target is missed.

The database is built through the real ``StateDB`` API; only for the build, the connection's
``synchronous`` is turned off (the figures would otherwise measure fsyncs of 300,000 build
transactions, not the reads under test). The measured processes open it as a run does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay.runner.state import StateDB
from assay.suites.experiment import TrialKey

TARGETS = {"status": 1.0, "status --json": 3.0, "resume start-up": 5.0}
FLAT_MIB = 40
SRC = str(Path(__file__).resolve().parents[1] / "src")

RESUME = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from assay.runner.state import StateDB
from assay.suites.experiment import TrialKey
sys.path.insert(0, {bench!r})
from state_scale import make_plan, identity
tasks, arms, reps = {shape!r}
plan = make_plan(tasks, arms, reps)
t_plan = time.perf_counter()
db = StateDB.open(Path({root!r}), identity(tasks, arms), plan, retries_infra=2)
t_open = time.perf_counter()
to_verify = db.recover()
t_recover = time.perf_counter()
left = db.pending()
t_pending = time.perf_counter()
print(json.dumps({{"plan": t_plan - t0, "open": t_open - t_plan,
                   "recover": t_recover - t_open, "pending": t_pending - t_recover,
                   "to_verify": len(to_verify), "left": len(left)}}))
"""


def make_plan(tasks: int, arms: int, reps: int, seed: int = 7) -> list[TrialKey]:
    """The same shape ``suites.experiment.plan`` produces: shuffled (task, rep) blocks, each
    with every arm in a seeded order."""
    rng = random.Random(seed)
    blocks = [(f"task-{t:04d}", r) for t in range(tasks) for r in range(reps)]
    rng.shuffle(blocks)
    names = [f"arm{a}" for a in range(arms)]
    out = []
    for task, rep in blocks:
        order = names[:]
        rng.shuffle(order)
        out += [TrialKey(task, a, rep) for a in order]
    return out


def identity(tasks: int, arms: int) -> dict:
    return {"file_sha256": "0" * 64, "settings": {"name": "state-scale"},
            "tasks": {f"task-{t:04d}": {"tests_digest": f"sha256:{t:064x}"}
                      for t in range(tasks)},
            "arms": {f"arm{a}": {"agent": f"command:agent --v{a}"} for a in range(arms)}}


def build(root: Path, tasks: int, arms: int, reps: int) -> dict[str, int]:
    """Half the plan done (with earlier interrupted and infra_error attempts on some), then
    what a crash of a ``-j 16`` runner leaves in flight, the rest pending."""
    plan = make_plan(tasks, arms, reps)
    rng = random.Random(1)
    db = StateDB.open(root, identity(tasks, arms), plan, retries_infra=2)
    db._conn.execute("PRAGMA synchronous=OFF")  # build speed only, see the module docstring
    half = len(plan) // 2
    made = {"interrupted_before": 0, "infra_before": 0, "in_flight": 0}

    def through(key: TrialKey, *states: str):  # noqa: ANN202
        a = db.begin_attempt(key)
        for s in states:
            a = db.move(a, s)
        return a

    for key in plan[:half]:
        roll = rng.random()
        if roll < 0.05:
            db.finish_attempt(through(key, "running"), "interrupted", reason="runner_restart")
            made["interrupted_before"] += 1
        elif roll < 0.07:
            db.finish_attempt(through(key), "infra_error", reason="sandbox failed")
            made["infra_before"] += 1
        a = through(key, "running", "freezing", "verifying")
        accepted = rng.random() < 0.6
        db.grade_trial(a, accepted=accepted,
                       failure_code=None if accepted else rng.choice(
                           ["behavior_failed", "regression_failed", "agent_timeout",
                            "budget_exhausted"]), revision="v1")
    flight = [(), ("running",)] + [("running",)] * 8 + [("running", "freezing")] * 2 \
        + [("running", "freezing", "verifying")] * 3 + [
            ("running", "freezing", "verifying", "grader_error")]
    for key, states in zip(plan[half:], flight, strict=False):
        through(key, *states)
        made["in_flight"] += 1
    db.close()
    return made


# Peak RSS is read by the measured process itself, at exit, from /proc/self/status (VmHWM
# belongs to the address space, so it starts afresh at exec); the rusage a parent gets from
# wait4 keeps the high-water mark of the parent's pages the child had before its exec.
_WRAP = """
import atexit, os, runpy, sys
def _peak():
    with open("/proc/self/status") as fh:
        kib = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    with open(os.environ["BENCH_PEAK_FILE"], "w") as out:
        out.write(kib)
atexit.register(_peak)
flag, what, *rest = sys.argv[1:]
if flag == "-m":
    sys.argv = [what, *rest]
    runpy.run_module(what, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *rest]
    exec(compile(what, "<bench>", "exec"), {"__name__": "__main__"})
"""


def _timed(args: list[str], out_path: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of ``python ARGS`` in a fresh process."""
    peak = out_path.with_suffix(".peak")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "BENCH_PEAK_FILE": str(peak)}
    with open(out_path, "w") as sink:
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", _WRAP, *args], stdout=sink, env=env,
                             check=False)
        wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{args}: exit {res.returncode}")
    return wall, int(peak.read_text()) / 1024, out_path.read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--arms", type=int, default=4)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--keep", type=Path, help="Build into this directory and keep it.")
    opts = ap.parse_args()
    base = opts.keep or Path(tempfile.mkdtemp(prefix="assay-state-scale-"))
    big, small = base / "big", base / "small"
    planned = opts.tasks * opts.arms * opts.reps
    print(f"building {planned:,} trials ({opts.tasks} tasks x {opts.arms} arms x "
          f"{opts.reps} reps) in {big} ...", flush=True)
    t0 = time.perf_counter()
    made = build(big, opts.tasks, opts.arms, opts.reps)
    build(small, max(1, opts.tasks // 100), opts.arms, opts.reps)
    print(f"built in {time.perf_counter() - t0:.1f} s: half done, {made}; "
          f"state.sqlite {(big / 'state.sqlite').stat().st_size / 2**20:.1f} MiB")

    py = ["-m", "assay", "exp", "status"]
    startup, startup_rss, _ = _timed(["-m", "assay", "--help"],
                                     base / "help.txt")
    rows: list[tuple[str, float, float, str]] = []
    wall, rss, text = _timed([*py, str(big)], base / "status.txt")
    listed = sum(1 for line in text.splitlines() if line.startswith("task-"))
    rows.append(("status", wall, rss, f"{listed:,} not-done lines"))
    json_out = base / "status.json"
    wall, rss, _ = _timed([*py, str(big), "--json"], json_out)
    trials = json.loads(json_out.read_text())["trials"]
    if len(trials) != planned:
        raise SystemExit(f"--json listed {len(trials)} trials, not {planned}")
    rows.append(("status --json", wall, rss, f"{len(trials):,} trials, "
                 f"{json_out.stat().st_size / 2**20:.1f} MiB of JSON"))
    del trials
    _, small_rss, _ = _timed([*py, str(small), "--json"], base / "small.json")
    code = RESUME.format(bench=str(Path(__file__).parent), root=str(big),
                         shape=(opts.tasks, opts.arms, opts.reps))
    wall, rss, out = _timed(["-c", code], base / "resume.json")
    parts = json.loads(out)
    rows.append(("resume start-up", wall, rss,
                 f"plan {parts['plan']:.2f} s, open+checks {parts['open']:.2f} s, recover "
                 f"{parts['recover']:.3f} s ({parts['to_verify']} to verify), pending "
                 f"{parts['pending']:.2f} s ({parts['left']:,} left)"))

    print(f"\npython -m assay --help alone: {startup:.2f} s, {startup_rss:.0f} MiB peak RSS")
    print(f"{'measure':<17}{'wall':>8}{'target':>9}{'RSS MiB':>9}  result  detail")
    failed = False
    for name, wall, rss, detail in rows:
        ok = wall < TARGETS[name]
        failed |= not ok
        print(f"{name:<17}{wall:>7.2f}s{TARGETS[name]:>8.1f}s{rss:>9.0f}  "
              f"{'PASS' if ok else 'FAIL'}    {detail}")
    json_rss = rows[1][2]
    flat = json_rss - small_rss < FLAT_MIB
    failed |= not flat
    print(f"memory: --json peak RSS {json_rss:.0f} MiB at {planned:,} trials vs "
          f"{small_rss:.0f} MiB at 1/100 the size (limit +{FLAT_MIB} MiB): "
          f"{'PASS' if flat else 'FAIL'}")
    if not opts.keep:
        import shutil

        shutil.rmtree(base)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
