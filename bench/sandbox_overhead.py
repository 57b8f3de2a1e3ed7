"""Added wall time per execution: ``python3 -c pass`` through the sandbox vs a bare subprocess.

    .venv/bin/python bench/sandbox_overhead.py [--n 200] [--isolation bwrap|none] [--no-cgroups]

Both sides run the same interpreter (python3 as found on the sandbox's PATH, so the host's PATH
shims do not make the bare side slower) and are interleaved, so drift in machine load hits both
equally. Prints medians, the ratio, the added milliseconds, and PASS/FAIL against the target of
< 50 ms added per trivial execution. Exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay.sandbox import DEFAULT_PATH, Limits, run_sandboxed

TARGET_ADDED_MS = 50.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="executions of each kind (default 200)")
    ap.add_argument("--isolation", choices=("bwrap", "none"), default="bwrap")
    ap.add_argument("--no-cgroups", action="store_true", help="force the rlimit fallback")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be >= 1")

    python = shutil.which("python3", path=DEFAULT_PATH)
    if python is None:
        print("python3 not found on", DEFAULT_PATH, file=sys.stderr)
        return 2
    limits = Limits(wall_seconds=30.0)
    sandbox_ms: list[float] = []
    bare_ms: list[float] = []
    mechanisms: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as tmp:
        workdir = Path(tmp)
        for _ in range(3):  # warm caches, the bwrap probe and the page cache
            run_sandboxed(["python3", "-c", "pass"], workdir, limits=limits)
            subprocess.run([python, "-c", "pass"], cwd=workdir, check=True)
        for _ in range(args.n):
            t0 = time.perf_counter()
            res = run_sandboxed(
                ["python3", "-c", "pass"],
                workdir,
                limits=limits,
                isolation=args.isolation,
                use_cgroups=not args.no_cgroups,
            )
            sandbox_ms.append((time.perf_counter() - t0) * 1000)
            if res.reason != "ok":
                print(f"sandboxed run failed: {res.reason} {res.detail}", file=sys.stderr)
                return 2
            mechanisms = {k: v.mechanism for k, v in res.limits_applied.items()}

            t0 = time.perf_counter()
            subprocess.run(
                [python, "-c", "pass"],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=True,
            )
            bare_ms.append((time.perf_counter() - t0) * 1000)

    med_s, med_b = statistics.median(sandbox_ms), statistics.median(bare_ms)
    added = med_s - med_b
    verdict = "PASS" if added < TARGET_ADDED_MS else "FAIL"
    p90 = lambda xs: statistics.quantiles(xs, n=10)[-1] if len(xs) >= 2 else xs[0]  # noqa: E731
    print(f"sandbox overhead: {args.n} x `python3 -c pass` each, interleaved")
    used = ", ".join(f"{k}={v}" for k, v in mechanisms.items())
    print(f"isolation={args.isolation}  limits: {used}")
    print()
    print(f"{'':<22}{'median ms':>12}{'p90 ms':>10}")
    print(f"{'bare subprocess':<22}{med_b:>12.1f}{p90(bare_ms):>10.1f}")
    print(f"{'run_sandboxed':<22}{med_s:>12.1f}{p90(sandbox_ms):>10.1f}")
    print()
    print(f"ratio (sandbox/bare)   {med_s / med_b:.2f}x")
    print(f"added per execution    {added:.1f} ms")
    print(f"target                 < {TARGET_ADDED_MS:.0f} ms added   {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
