"""How much slower is ``assay run`` than the thinnest possible loop over the official client?

Both sides talk to the same instant-answer server (bench/instant_server.py, its own process, so
it does not share a GIL with either client) at the same concurrency, on a generated suite, and
both are timed as whole processes (interpreter start, imports, suite loading, the requests, and
for assay its records and report), interleaved over several rounds; the medians are compared.

1. throughput: cases/s of ``assay run -j C`` against a bare ``openai.AsyncOpenAI`` loop with C
   workers sending the same messages (system + user); target assay/bare >= 1.0: the records,
   retries and report must cost less than what assay saves by not building the official
   client's request transform and response objects (see models/client.py).
2. time to first request: process spawn to the first chat request reaching the server.
3. peak RSS of ``assay run`` (os.wait4 ru_maxrss) on N cases, on a mid suite (default 10,000
   cases) and on a big suite (default 100,000 cases); target < 300 MB on the big one, and it
   should be flat: the table prints the slope between the mid and the big run (MB per 10,000
   cases; the per-case state a run still holds).
4. correctness of every assay run: exactly N rows with the generated ids, report.json n == N and
   the known accuracy (the server always answers "bug"; a third of the cases expect it), and
   the server saw exactly N chat requests (no hidden retries). A fast-but-wrong run fails.

Usage::

    .venv/bin/python bench/narrow_throughput.py [--n 2000] [--concurrency 64] [--rounds 3]
                                                [--mid 10000] [--big 100000 | --skip-big]

Exits 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERVER_SCRIPT = HERE / "instant_server.py"
ASSAY = Path(sys.executable).parent / "assay"
TARGET_RATIO = 1.0
TARGET_RSS_MB = 300.0
LABELS = ("bug", "feature", "question")
ANSWER = '{"label": "bug"}'

SYSTEM_PROMPT = """\
You are a triage classifier for GitHub issues. You will be given one issue (a title and a body). \
Classify it into exactly one of these labels:

- bug: existing behaviour is wrong (crash, hang, data loss, incorrect output, regression).
- feature: the issue asks for a new capability or a change to behaviour that works as intended.
- question: the issue asks how to use or configure the software, and nothing is broken.

Respond with ONLY a JSON object of the form {"label": "<bug|feature|question>"}, with exactly one \
of the three labels in lower case. No prose, no explanation, no code fences.
"""

# The bare baseline: the least a script can do to send the same requests with the official client.
BARE_LOOP = r'''
import asyncio, json, os, sys
import openai

async def main(base_url, suite, concurrency):
    system = open(os.path.join(suite, "prompts", "system.txt"), encoding="utf-8").read()
    with open(os.path.join(suite, "data", "cases.jsonl"), encoding="utf-8") as fh:
        cases = [json.loads(line) for line in fh if line.strip()]
    client = openai.AsyncOpenAI(base_url=base_url, api_key=os.environ["MODEL_API_KEY"],
                                max_retries=0)
    pending = iter(cases)
    done = ok = 0

    async def worker():
        nonlocal done, ok
        for case in pending:
            resp = await client.chat.completions.create(
                model="bench", temperature=0,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": case["input"]}])
            content = resp.choices[0].message.content
            done += 1
            ok += content == '{"label": "bug"}'

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    print(json.dumps({"done": done, "ok": ok}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
'''

# ----------------------------------------------------------------------------- suite generation

_PRODUCTS = ["plotwise", "nimbi", "the CLI", "the SDK", "the web dashboard", "the sync agent",
             "the Python client", "the exporter", "the scheduler", "the REST API"]
_AREAS = ["CSV export", "login", "the settings page", "pagination", "the cache", "retries",
          "timezone handling", "the search index", "file uploads", "webhooks", "dark mode",
          "the config loader", "rate limiting", "the migration tool", "PDF rendering"]
_VERSIONS = ["2.4.1", "3.0.0", "3.3.0", "1.9.12", "4.1.0-rc2", "main"]
_BUG = [
    "After upgrading to {v}, {a} in {p} fails with a stack trace whenever the input contains "
    "non-ASCII characters. It worked fine on the previous release. Steps: open the project, "
    "trigger {a}, and the process exits with code 1. Logs attached; happy to test a fix.",
    "{A} in {p} silently drops the last row when the list has an even number of items. "
    "We noticed because monthly totals stopped matching the database. Reproduced on {v} on "
    "Linux and macOS. Expected every row to be kept, as the docs say.",
    "Since {v}, {p} hangs forever during {a} if the network drops for a second. CPU stays at "
    "zero and nothing is logged, so we have to kill it by hand. Before the upgrade it "
    "retried and recovered on its own within a few seconds.",
]
_FEATURE = [
    "It would be great if {p} could support {a} for multiple workspaces at once. Today we run "
    "it once per workspace from a shell loop, which is slow and error prone. A flag or a "
    "config option would be enough for us; we can help with a PR.",
    "Please add a way to configure {a} in {p} from environment variables. In containers we "
    "cannot easily mount a config file, and every other setting already has an env var. "
    "Something like a prefix plus the setting name would match the existing style.",
    "Feature request: let {p} emit progress events during {a}, so long jobs can show a "
    "progress bar. Right now there is no feedback until the end. A callback or a simple "
    "JSON line on stderr would cover our use case on {v}.",
]
_QUESTION = [
    "How do I make {a} in {p} use a proxy? I read the docs for {v} but could not find the "
    "right option. Is there a setting for this, or should I set the usual environment "
    "variables? Nothing is broken, I just want to know the intended way.",
    "Is it safe to call {a} in {p} from several threads at once? We want to parallelise a "
    "batch job but the documentation does not say whether the client is thread safe. "
    "Should we create one instance per thread instead?",
    "What is the recommended way to test code that uses {a} in {p}? We would like to avoid "
    "real network calls in CI. Is there a fake or a mock mode in {v}, or do people usually "
    "patch the transport layer themselves?",
]
_TITLES = {
    "bug": ["{A} broken in {v}", "{A} crashes with unicode input", "Regression: {a} hangs",
            "{A} loses data"],
    "feature": ["Support {a} for several workspaces", "Add env var config for {a}",
                "Progress events for {a}"],
    "question": ["How to use a proxy with {a}?", "Is {a} thread safe?", "Testing {a} without "
                 "network"],
}
_BODIES = {"bug": _BUG, "feature": _FEATURE, "question": _QUESTION}


def case_id(i: int) -> str:
    return f"case-{i:06d}"


def expected_label(i: int) -> str:
    return LABELS[i % 3]


def expected_accuracy(n: int) -> tuple[int, float]:
    """The server always answers "bug" and case i expects LABELS[i % 3]."""
    correct = (n + 2) // 3
    return correct, correct / n


def make_suite(root: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    (root / "data").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "prompts" / "system.txt").write_text(SYSTEM_PROMPT, encoding="utf-8")
    (root / "suite.yaml").write_text(
        "description: generated by bench/narrow_throughput.py\n"
        "labels: [bug, feature, question]\noutput_field: label\ntemperature: 0\nrepeats: 1\n",
        encoding="utf-8")
    with open(root / "data" / "cases.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            label = expected_label(i)
            a, p, v = rng.choice(_AREAS), rng.choice(_PRODUCTS), rng.choice(_VERSIONS)
            fmt = {"a": a, "A": a[:1].upper() + a[1:], "p": p, "v": v}
            title = rng.choice(_TITLES[label]).format(**fmt)
            body = rng.choice(_BODIES[label]).format(**fmt)
            text = f"Title: {title}\nBody: {body}"
            fh.write(json.dumps({"id": case_id(i), "input": text, "expected": label}) + "\n")
    return root


# ----------------------------------------------------------------------------- processes

_LIVE: list[subprocess.Popen[Any]] = []


def _stop(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    if proc.returncode is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except (ProcessLookupError, ChildProcessError):
        pass


def cleanup_processes() -> None:
    while _LIVE:
        _stop(_LIVE.pop())


class Server:
    """bench/instant_server.py in a child process, plus its /stats and /reset."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "--port", "0", "--exit-on-stdin-eof"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        _LIVE.append(self.proc)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"instant server did not start (said {line!r})")
        self.port = int(line[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _call(self, method: str, path: str) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def reset(self) -> None:
        self._call("POST", "/reset")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")


@dataclass
class ProcResult:
    wall_s: float
    cpu_s: float  # user + system CPU of the child: robust to other load on the machine
    returncode: int
    maxrss_kib: int
    ttfr_s: float | None  # spawn to first chat request at the server
    requests: int


def run_measured(cmd: list[str], server: Server, env: dict[str, str],
                 stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL) -> ProcResult:
    """Spawn, reap with os.wait4 (for ru_maxrss), and read the server's view of the run."""
    server.reset()
    spawned_at = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                            cwd=ROOT, start_new_session=True)
    _LIVE.append(proc)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    _LIVE.remove(proc)
    stats = server.stats()
    first = stats["first_request"]
    return ProcResult(wall, usage.ru_utime + usage.ru_stime, proc.returncode, usage.ru_maxrss,
                      None if first is None else first - spawned_at, stats["count"])


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["MODEL_API_KEY"] = "bench"
    for var in ("MODEL_BASE_URL", "MODEL_NAME", "OPENAI_BASE_URL"):
        env.pop(var, None)
    # Loopback must never go through a proxy that happens to be configured.
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


# ----------------------------------------------------------------------------- the two contenders


class CheckFailed(Exception):
    def __init__(self, message: str, result: ProcResult | None = None) -> None:
        super().__init__(message)
        self.result = result  # the measurement, kept even when the run was wrong


@dataclass
class Contender:
    name: str
    results: list[ProcResult] = field(default_factory=list)


def run_bare(server: Server, suite: Path, n: int, concurrency: int, script: Path,
             work: Path) -> ProcResult:
    out_path = work / "bare.out"
    with open(out_path, "wb") as out, open(work / "bare.err", "wb") as err:
        res = run_measured([sys.executable, str(script), server.base_url, str(suite),
                            str(concurrency)], server, child_env(), stdout=out, stderr=err)
    if res.returncode != 0:
        raise CheckFailed(f"bare loop exited {res.returncode}:\n{_tail(work / 'bare.err')}")
    said = json.loads(out_path.read_text().strip().splitlines()[-1])
    if said != {"done": n, "ok": n} or res.requests != n:
        raise CheckFailed(f"bare loop: {said}, server saw {res.requests} requests; want {n}")
    return res


def run_assay(server: Server, suite: Path, n: int, concurrency: int, work: Path,
              tag: str) -> ProcResult:
    out_dir = work / f"run-{tag}"
    log = work / f"assay-{tag}.log"
    with open(log, "wb") as fh:
        res = run_measured([str(ASSAY), "run", str(suite), "--base-url", server.base_url,
                            "--model", "bench", "-j", str(concurrency), "--out", str(out_dir)],
                           server, child_env(), stdout=fh, stderr=subprocess.STDOUT)
    try:
        if res.returncode != 0:
            raise CheckFailed(f"assay exited {res.returncode}:\n{_tail(log)}", res)
        verify_run(out_dir, n, res.requests)
    except CheckFailed as exc:
        exc.result = res
        raise
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        log.unlink(missing_ok=True)
    return res


def verify_run(out_dir: Path, n: int, server_requests: int) -> None:
    """A run only counts when it is right: every case once, the known accuracy, no extra calls."""
    problems: list[str] = []
    ids: list[str] = []
    bad_rows = 0
    with open(out_dir / "raw_predictions.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            ids.append(row["id"])
            i = int(row["id"].rsplit("-", 1)[1])
            if (row.get("error") or row.get("label") != "bug" or row.get("raw") != ANSWER
                    or row.get("expected") != expected_label(i)
                    or row.get("correct") != (expected_label(i) == "bug")):
                bad_rows += 1
    if len(ids) != n:
        problems.append(f"raw_predictions.jsonl has {len(ids)} rows, want {n}")
    unique = set(ids)
    if len(unique) != len(ids):
        problems.append(f"{len(ids) - len(unique)} duplicate ids")
    if unique != {case_id(i) for i in range(n)}:
        problems.append("ids differ from the suite's")
    if bad_rows:
        problems.append(f"{bad_rows} rows with a wrong label/raw/expected/correct or an error")
    rep = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    correct, accuracy = expected_accuracy(n)
    if rep.get("n") != n:
        problems.append(f"report.json n = {rep.get('n')}, want {n}")
    if rep.get("correct") != correct:
        problems.append(f"report.json correct = {rep.get('correct')}, want {correct}")
    if rep.get("accuracy") is None or abs(rep["accuracy"] - accuracy) > 1e-12:
        problems.append(f"report.json accuracy = {rep.get('accuracy')}, want {accuracy}")
    if rep.get("infra_errors") or rep.get("missing_rows"):
        problems.append(f"report.json infra_errors = {rep.get('infra_errors')}, "
                        f"missing_rows = {rep.get('missing_rows')}")
    if server_requests != n:
        problems.append(f"server saw {server_requests} chat requests, want {n}")
    if problems:
        raise CheckFailed("assay run is wrong: " + "; ".join(problems))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


# ----------------------------------------------------------------------------- output


def mb(kib: int) -> float:
    return kib * 1024 / 1e6


def verdict(ok: bool) -> str:
    return "[bold green]PASS[/]" if ok else "[bold red]FAIL[/]"


def print_table(args: argparse.Namespace, bare: Contender, assay: Contender,
                sized: dict[int, ProcResult | None], big_error: str | None) -> bool:
    from rich.console import Console
    from rich.table import Table

    n = args.n
    bare_wall = statistics.median(r.wall_s for r in bare.results)
    assay_wall = statistics.median(r.wall_s for r in assay.results)
    bare_tp, assay_tp = n / bare_wall, n / assay_wall
    ratio = assay_tp / bare_tp
    cpu_b = statistics.median(r.cpu_s for r in bare.results)
    cpu_a = statistics.median(r.cpu_s for r in assay.results)
    ttfr_b = statistics.median(r.ttfr_s or 0.0 for r in bare.results)
    ttfr_a = statistics.median(r.ttfr_s or 0.0 for r in assay.results)
    rss_b = max(r.maxrss_kib for r in bare.results)
    rss_a = max(r.maxrss_kib for r in assay.results)
    ok_ratio = ratio >= TARGET_RATIO
    all_ok = ok_ratio

    table = Table(title=f"assay run vs bare openai loop: N={n:,}, -j {args.concurrency}, "
                        f"median of {args.rounds} interleaved rounds",
                  title_justify="left")
    table.add_column("measure")
    table.add_column("bare", justify="right")
    table.add_column("assay", justify="right")
    table.add_column("assay/bare", justify="right")
    table.add_column("target", justify="right")
    table.add_column("result", justify="center")
    table.add_row("throughput (cases/s)", f"{bare_tp:,.0f}", f"{assay_tp:,.0f}", f"{ratio:.2f}",
                  f">= {TARGET_RATIO:.2f}", verdict(ok_ratio))
    table.add_row("wall time (s)", f"{bare_wall:.2f}", f"{assay_wall:.2f}",
                  f"{assay_wall / bare_wall:.2f}", "", "")
    table.add_row("CPU time, user+sys (s)", f"{cpu_b:.2f}", f"{cpu_a:.2f}",
                  f"{cpu_a / cpu_b:.2f}", "", "")
    table.add_row("time to first request (s)", f"{ttfr_b:.2f}", f"{ttfr_a:.2f}",
                  f"{ttfr_a / ttfr_b:.2f}" if ttfr_b else "", "", "")
    table.add_row(f"peak RSS, N={n:,} (MB)", f"{mb(rss_b):.0f}", f"{mb(rss_a):.0f}", "", "", "")
    if args.skip_big:
        table.add_row("peak RSS, big suite (MB)", "", "skipped", "", f"< {TARGET_RSS_MB:.0f}",
                      "")
    for size, res in sized.items():
        is_big = size == args.big
        if res is None:
            all_ok = False
            table.add_row(f"peak RSS, N={size:,} (MB)", "", "error", "",
                          f"< {TARGET_RSS_MB:.0f}" if is_big else "", verdict(False))
            continue
        ok_rss = mb(res.maxrss_kib) < TARGET_RSS_MB or not is_big
        all_ok = all_ok and ok_rss
        table.add_row(f"peak RSS, N={size:,} (MB)", "", f"{mb(res.maxrss_kib):.0f}", "",
                      f"< {TARGET_RSS_MB:.0f}" if is_big else "",
                      verdict(ok_rss) if is_big else "")
        table.add_row(f"throughput, N={size:,} (cases/s)", "", f"{size / res.wall_s:,.0f}",
                      "", "", "")
    mid, big = sized.get(args.mid), sized.get(args.big)
    if mid is not None and big is not None and args.big > args.mid:
        slope = (mb(big.maxrss_kib) - mb(mid.maxrss_kib)) / (args.big - args.mid) * 10_000
        table.add_row("RSS slope (MB per 10,000 cases)", "", f"{slope:.1f}", "", "", "")
    table.add_row("answers verified", "ok", "ok" if big_error is None else "WRONG", "",
                  "all runs", verdict(big_error is None))
    all_ok = all_ok and big_error is None

    console = Console()
    console.print(table)
    rounds = "  ".join(f"r{i + 1}: bare {b.wall_s:.2f}/{b.cpu_s:.2f}s, "
                       f"assay {a.wall_s:.2f}/{a.cpu_s:.2f}s"
                       for i, (b, a) in enumerate(zip(bare.results, assay.results, strict=True)))
    console.print(f"[dim]rounds (wall/CPU): {rounds}[/]", highlight=False)
    load = " / ".join(f"{x:.1f}" for x in args.loadavg) + " → " + " / ".join(
        f"{x:.1f}" for x in os.getloadavg())
    cpus = os.cpu_count() or 1
    busy = max(args.loadavg[0], os.getloadavg()[0]) > cpus
    console.print(f"[{'yellow' if busy else 'dim'}]load average (1/5/15 min) before → after: "
                  f"{load} on {cpus} CPUs."
                  + (" The machine was busy with other work: wall times are noisy (CPU time "
                     "less so, but not immune); re-run on a quiet machine before trusting a "
                     "FAIL of the ratio." if busy else "") + "[/]", highlight=False)
    console.print("[dim]Wall time is the whole process (start-up, imports, suite, requests, "
                  "records, report). bare = AsyncOpenAI(max_retries=0) with the same messages "
                  "and concurrency, no records. For scale: a widely used eval framework "
                  "measured about 10% (ratio ~0.10) on this check.[/]", highlight=False)
    if big_error:
        console.print(f"[red]{big_error}[/]", highlight=False)
    return all_ok


# ----------------------------------------------------------------------------- main


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="cases in the throughput suite")
    parser.add_argument("--concurrency", "-j", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median kept")
    parser.add_argument("--mid", type=int, default=10_000,
                        help="cases in the smaller RSS suite (the slope's start)")
    parser.add_argument("--big", type=int, default=100_000, help="cases in the RSS suite")
    parser.add_argument("--skip-big", action="store_true", help="skip the big-suite RSS run")
    args = parser.parse_args()
    if args.n < 1 or args.rounds < 1 or args.concurrency < 1 or args.big < 1 or args.mid < 1:
        parser.error("--n, --rounds, --concurrency, --mid and --big must be >= 1")
    if not ASSAY.exists():
        parser.error(f"{ASSAY} not found: run with the project's venv python")

    args.loadavg = os.getloadavg()
    signal.signal(signal.SIGTERM, _interrupt)
    work = Path(tempfile.mkdtemp(prefix="assay-bench-"))
    try:
        server = Server()
        bare_script = work / "bare_loop.py"
        bare_script.write_text(BARE_LOOP, encoding="utf-8")
        suite = make_suite(work / "suite", args.n)
        bare, assay = Contender("bare"), Contender("assay")

        # Warm-up (not timed): page cache for both import graphs, server sockets.
        warm = make_suite(work / "warm", min(args.n, 200), seed=1)
        run_bare(server, warm, min(args.n, 200), args.concurrency, bare_script, work)
        run_assay(server, warm, min(args.n, 200), args.concurrency, work, "warm")

        for r in range(args.rounds):
            order = [("bare", bare), ("assay", assay)]
            if r % 2:
                order.reverse()
            for name, contender in order:
                say(f"round {r + 1}/{args.rounds}: {name} on {args.n:,} cases ...")
                if name == "bare":
                    res = run_bare(server, suite, args.n, args.concurrency, bare_script, work)
                else:
                    res = run_assay(server, suite, args.n, args.concurrency, work, f"r{r}")
                contender.results.append(res)
                say(f"  {res.wall_s:.2f}s, {args.n / res.wall_s:,.0f} cases/s")

        sized: dict[int, ProcResult | None] = {}
        big_error: str | None = None
        for size in ([] if args.skip_big else sorted({args.mid, args.big})):
            say(f"RSS suite: generating {size:,} cases ...")
            rss_suite = make_suite(work / f"rss-{size}", size, seed=2)
            say(f"RSS suite: assay run on {size:,} cases (peak RSS) ...")
            try:
                res = run_assay(server, rss_suite, size, args.concurrency, work, f"rss-{size}")
                sized[size] = res
                say(f"  {res.wall_s:.1f}s, peak RSS {mb(res.maxrss_kib):.0f} MB")
            except CheckFailed as exc:
                sized[size] = exc.result
                big_error = f"{size:,}-case run: {exc}"
            shutil.rmtree(rss_suite, ignore_errors=True)
        ok = print_table(args, bare, assay, sized, big_error)
        return 0 if ok else 1
    except CheckFailed as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleanup_processes()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
