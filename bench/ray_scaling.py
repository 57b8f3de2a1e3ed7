"""What ``--executor ray`` costs over a local run: the same 24-trial experiment both ways.

    .venv/bin/python bench/ray_scaling.py [--trials 24] [--jobs 4] [--sleep 2]
        [--ray-transfer shared_fs|object_store|both]

The experiment is ``bench/runner_scaling.py``'s (one tiny bundle, one arm whose agent sleeps
``--sleep`` seconds then fixes the bug; real sandbox, real verifier), run once with the local
executor (``--verify-jobs 0``: each attempt keeps its slot until graded, as a Ray attempt
does; the default verify gate's local run is printed beside it) and once as Ray tasks on a
one-node Ray cluster this script starts on this machine (``ray start --head --block`` with
``--num-cpus`` = ``--jobs``, a private temp dir and free ports; ended by its process group
when the script ends, never by ``ray stop``). Printed: the
wall times, the runner's own overhead per trial inside each attempt (``runner_scaling``'s
measure: stage seconds less the sleep and the verifier's commands), the Ray overhead per trial
(the extra wall time, spread over the trials: ``(wall_ray - wall_local) * jobs / trials``) and
the ratio of the walls; ``--ray-transfer both`` runs the Ray side once per transfer (the
bundle and the attempts' files through the object store, ``docs/scaling.md``). Needs
``pip install 'assay[ray]'``. Exit 1 when a trial was not accepted in any run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runner_scaling import _bundle, _overhead

from assay.runner.experiment import run_experiment


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _start_head(temp_dir: Path, cpus: int) -> tuple[subprocess.Popen[bytes], str]:
    from ray.util import get_node_ip_address

    port = _free_port()
    ray = Path(sys.executable).parent / "ray"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["TMPDIR"] = str(temp_dir / "tmp")  # the workers' temporary files, removed with it
    (temp_dir / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [str(ray), "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
         f"--temp-dir={temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
         f"--dashboard-agent-listen-port={_free_port()}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    address = f"{get_node_ip_address()}:{port}"
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False)"
    for _ in range(60):
        if subprocess.run([sys.executable, "-c", probe, address],
                          capture_output=True).returncode == 0:
            return proc, address
        time.sleep(1)
    _stop(proc)
    raise SystemExit("the Ray head did not come up")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _ours(marker: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker.encode() in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            pass
    return found


def _run(root: Path, name: str, trials: int, jobs: int, sleep: float,
         **kw: Any) -> tuple[float, float, int, str]:
    exp = root / f"{name}.yaml"
    exp.write_text(f"name: {name}\ntasks: [tasks]\nrepetitions: {trials}\nconcurrency: {jobs}\n"
                   f"arms:\n  fixer:\n    agent: \"command:sleep {sleep:g}; sed -i "
                   "'s/a - b/a + b/' src/calc/__init__.py\"\n")
    out = root / f"run-{name}"
    t0 = time.perf_counter()
    res = run_experiment(exp, out, **kw)
    wall = time.perf_counter() - t0
    accepted = sum(1 for g in out.glob("trials/*/*/*/a*/grades/v1.json")
                   if json.loads(g.read_text())["accepted"])
    return wall, statistics.median(_overhead(out, sleep)[0]), accepted, res.status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=2.0)
    ap.add_argument("--ray-transfer", choices=["shared_fs", "object_store", "both"],
                    default="shared_fs")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise SystemExit("needs Ray: pip install 'assay[ray]'") from None
    with tempfile.TemporaryDirectory(prefix="assay-bench-ray-") as tmp:
        root = Path(tmp)
        _bundle(root / "tasks" / "calc", "pytest")
        # the baseline holds each -j slot until graded, as a Ray attempt does (its verifier
        # runs on the worker, within the task's resources); the verify gate's local run is
        # shown beside it, not compared against
        local = _run(root, "local", args.trials, args.jobs, args.sleep, verify_jobs=0)
        gated = _run(root, "localgate", args.trials, args.jobs, args.sleep)
        ray_tmp = Path(tempfile.mkdtemp(prefix="abr", dir="/tmp"))  # short: Ray's sockets
        head, address = _start_head(ray_tmp, args.jobs)
        transfers = (["shared_fs", "object_store"] if args.ray_transfer == "both"
                     else [args.ray_transfer])
        remotes: dict[str, tuple[float, float, int, str]] = {}
        try:
            for transfer in transfers:
                name = "ray" if transfer == "shared_fs" else "ray-objstore"
                remotes[name] = _run(root, name.replace("-", ""), args.trials, args.jobs,
                                     args.sleep, executor="ray", ray_address=address,
                                     ray_transfer=transfer)
        finally:
            _stop(head)
            for pid in _ours(str(ray_tmp)):  # this cluster's processes only, by its temp dir
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    print(f"{args.trials} trials, -j {args.jobs}, agent sleep {args.sleep:g} s, "
          f"ideal {args.trials * args.sleep / args.jobs:.1f} s")
    print(f"{'executor':<12} {'wall s':>7} {'in-attempt overhead/trial s (median)':>37} "
          f"{'accepted':>9}  status")
    rows = (("local", local), ("local, gate", gated), *remotes.items())
    for name, (wall, over, acc, status) in rows:
        print(f"{name:<12} {wall:>7.1f} {over:>37.3f} {acc:>5}/{args.trials}  {status}")
    for name, remote in remotes.items():
        per_trial = (remote[0] - local[0]) * args.jobs / args.trials
        label = "Ray" if name == "ray" else "Ray (object_store)"
        print(f"{label} overhead per trial: {per_trial:+.2f} s; wall ratio {name}/local: "
              f"{remote[0] / local[0]:.2f}")
    ok = all(r[2] == args.trials for r in remotes.values())
    print("(local: --verify-jobs 0, each attempt keeps its slot until graded, as on Ray; "
          "local, gate: the default verify gate, runner/slots.py)")
    return 0 if local[2] == args.trials and gated[2] == args.trials and ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
