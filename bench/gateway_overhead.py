"""What does the model gateway add to a model call?

2,000 chat completions to an instant local upstream (bench/instant_server.py, its own process),
directly and through the gateway, at the same concurrency, in one run. The run is cut into a
few rounds that alternate direct and gateway segments (ABBA...), so both sides meet the same
background load: on a 2-core machine shared with other work, load that moves between two
back-to-back halves would otherwise decide the comparison. The gateway
runs as the runner runs it: on a background thread of this process, with one attempt (scoped
token, ledger on disk, fsync'd) per concurrent worker. The workers are an agent-like load
generator in a process of its own (agents are always other processes), using the official
``openai`` client by default, or ``--client raw``, a bare asyncio HTTP/1.1 client that costs far
less per call and so shows the gateway's own cost more harshly.

Each attempt reaches the gateway through a channel of its own (``Gateway.open_tcp_channel``),
as the runner's attempts do; ``--shared`` puts them all on the gateway's one port instead.

Printed: latency p50/p95 of both, the added latency, throughput of both and their ratio, each
against its target (p50 added < 2 ms, throughput >= 90% of direct) with PASS/FAIL, and checks
that every answer arrived intact and every call is in a ledger. Exit 0 when all pass.

Usage::

    .venv/bin/python bench/gateway_overhead.py [--n 2000] [--concurrency 4] [--client openai|raw]
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from assay.models.gateway.service import Gateway, Limits, Upstream  # noqa: E402
from assay.records.io import iter_rows  # noqa: E402

CONTENT = '{"label": "bug"}'
TARGET_P50_ADDED_MS = 2.0
TARGET_RATIO = 0.90

# The load generator: C workers, each with its own key (one attempt each through the gateway),
# sending the same small chat request; per-call latency measured around the client call.
LOAD = r'''
import asyncio, json, sys, time
urls, keys, n, warmup, kind = json.loads(sys.argv[1]), json.loads(sys.argv[2]), \
    int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
CONTENT = '{"label": "bug"}'
MESSAGES = [{"role": "system", "content": "Classify the issue as bug, feature or question."},
            {"role": "user", "content": "The export button crashes the app on save."}]

def openai_caller(key, base_url):
    import openai
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    async def call():
        r = await client.chat.completions.create(model="bench", messages=MESSAGES)
        return r.choices[0].message.content
    return call

def raw_caller(key, base_url):
    from urllib.parse import urlsplit
    u = urlsplit(base_url)
    body = json.dumps({"model": "bench", "messages": MESSAGES}).encode()
    head = (f"POST {u.path}/chat/completions HTTP/1.1\r\nHost: {u.netloc}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    conn = []
    async def call():
        if not conn:
            conn.extend(await asyncio.open_connection(u.hostname, u.port))
        reader, writer = conn
        writer.write(head + body)
        h = await reader.readuntil(b"\r\n\r\n")
        i = h.lower().find(b"content-length:")
        data = await reader.readexactly(int(h[i + 15:h.find(b"\r\n", i)]))
        return json.loads(data)["choices"][0]["message"]["content"]
    return call

async def main():
    make = openai_caller if kind == "openai" else raw_caller
    callers = [make(k, u) for k, u in zip(keys, urls)]
    counter = iter(range(warmup))
    async def warm(call):
        for _ in counter:
            await call()
    await asyncio.gather(*(warm(c) for c in callers))
    todo = iter(range(n))
    lat, bad = [], 0
    async def work(call):
        nonlocal bad
        for _ in todo:
            t = time.perf_counter()
            content = await call()
            lat.append((time.perf_counter() - t) * 1000)
            bad += content != CONTENT
    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(work(c) for c in callers))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"latencies_ms": lat, "wall_s": wall, "bad": bad, "cpu_s": cpu}))

asyncio.run(main())
'''


def _load(urls: list[str], keys: list[str], n: int, client: str,
          warmup: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", LOAD, json.dumps(urls), json.dumps(keys), str(n),
                          str(warmup), client], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"load generator failed:\n{out.stderr}")
    return json.loads(out.stdout)


def _cpu() -> float:
    """CPU seconds of this process: the gateway's threads (the main one waits meanwhile)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--client", choices=["openai", "raw"], default="openai")
    parser.add_argument("--rounds", type=int, default=10,
                        help="alternating direct/gateway segments per side")
    parser.add_argument("--shared", action="store_true",
                        help="every attempt on the gateway's shared port, not a channel of "
                             "its own (the runner gives each attempt a channel)")
    args = parser.parse_args()
    warmup = 2 * args.concurrency  # per segment: connections opened, first-call costs paid

    server = subprocess.Popen([sys.executable, str(HERE / "instant_server.py"), "--port", "0",
                               "--exit-on-stdin-eof"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        upstream_url = f"http://127.0.0.1:{port}/v1"
        per = [args.n // args.rounds + (i < args.n % args.rounds) for i in range(args.rounds)]
        direct: dict[str, Any] = {"latencies_ms": [], "wall_s": 0.0, "bad": 0}
        via: dict[str, Any] = {"latencies_ms": [], "wall_s": 0.0, "bad": 0}
        with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp, Gateway() as gw:
            ledgers = [Path(tmp) / f"att{i}" / "model_calls.jsonl"
                       for i in range(args.concurrency)]
            tokens = [gw.open_attempt(f"att{i}", ledger_path=path, model="bench",
                                      upstream=Upstream(upstream_url, "real-bench-key"),
                                      limits=Limits(), prices={"bench": {"input": 1.0,
                                                                         "output": 2.0}})
                      for i, path in enumerate(ledgers)]
            # each attempt on its own channel, as the runner runs it: its connections
            # counted from their accept, accepted at the channel's pace
            urls = ([gw.base_url] * len(tokens) if args.shared else
                    ["http://{}:{}/v1".format(*gw.open_tcp_channel(t)) for t in tokens])
            sides = [(direct, [upstream_url] * args.concurrency,
                      ["direct-key"] * args.concurrency),
                     (via, urls, tokens)]
            for r, n in enumerate(per):
                for total, url, keys in (sides if r % 2 == 0 else sides[::-1]):
                    before = _cpu()
                    got = _load(url, keys, n, args.client, warmup)
                    total["gateway_cpu_s"] = total.get("gateway_cpu_s", 0.0) + _cpu() - before
                    total["client_cpu_s"] = total.get("client_cpu_s", 0.0) + got["cpu_s"]
                    total["latencies_ms"] += got["latencies_ms"]
                    total["wall_s"] += got["wall_s"]
                    total["bad"] += got["bad"]
            for token in tokens:
                gw.close_attempt(token)
            rows = sum(1 for path in ledgers for _ in iter_rows(path))
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/stats")
        upstream_count = json.loads(conn.getresponse().read())["count"]
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.terminate()
        server.wait(10)

    expected = args.n + warmup * args.rounds
    d50, d95 = _pct(direct["latencies_ms"], 0.5), _pct(direct["latencies_ms"], 0.95)
    g50, g95 = _pct(via["latencies_ms"], 0.5), _pct(via["latencies_ms"], 0.95)
    d_tput, g_tput = args.n / direct["wall_s"], args.n / via["wall_s"]
    ratio = g_tput / d_tput
    checks = [
        ("p50 added latency", f"{g50 - d50:.3f} ms", f"< {TARGET_P50_ADDED_MS} ms",
         g50 - d50 < TARGET_P50_ADDED_MS),
        ("p95 added latency", f"{g95 - d95:.3f} ms", "(reported)", True),
        ("throughput ratio", f"{ratio:.3f}", f">= {TARGET_RATIO}", ratio >= TARGET_RATIO),
        ("answers intact", f"{direct['bad'] + via['bad']} bad", "0 bad",
         direct["bad"] + via["bad"] == 0),
        ("ledger rows", f"{rows}", f"{expected}", rows == expected),
        ("upstream saw", f"{upstream_count}", f"{2 * expected}",
         upstream_count == 2 * expected),
    ]
    print(f"gateway overhead: {args.n} chat completions, concurrency {args.concurrency}, "
          f"client {args.client}, {args.rounds} alternating rounds, {warmup} warm-up calls "
          f"per segment, {'the shared port' if args.shared else 'a channel per attempt'}\n")
    print(f"{'':22}{'direct':>12}{'gateway':>12}")
    print(f"{'latency p50 (ms)':22}{d50:12.3f}{g50:12.3f}")
    print(f"{'latency p95 (ms)':22}{d95:12.3f}{g95:12.3f}")
    print(f"{'mean latency (ms)':22}{statistics.fmean(direct['latencies_ms']):12.3f}"
          f"{statistics.fmean(via['latencies_ms']):12.3f}")
    print(f"{'throughput (calls/s)':22}{d_tput:12.1f}{g_tput:12.1f}")
    calls = args.n + warmup * args.rounds
    client_cpu = direct["client_cpu_s"] / args.n * 1000
    gateway_cpu = via["gateway_cpu_s"] / calls * 1000
    print(f"{'client CPU/call (ms)':22}{client_cpu:12.3f}"
          f"{via['client_cpu_s'] / args.n * 1000:12.3f}")
    print(f"{'gateway CPU/call (ms)':22}{'':12}{gateway_cpu:12.3f}")
    # With no idle core, calls/s follow CPU per call: the ratio cannot then exceed this.
    print(f"ratio when CPU-bound: {client_cpu / (client_cpu + gateway_cpu):.3f} "
          "(client / (client + gateway) CPU per call)\n")
    print(f"{'check':22}{'value':>14}{'target':>14}  result")
    for name, value, target, ok in checks:
        print(f"{name:22}{value:>14}{target:>14}  {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
