"""How does the gateway's transcript grow with an agent's steps, and what does keeping it cost?

An agent-like loop resends its whole history on every call (a system prompt, then per step the
model's answer and a 2 KB tool result), through the real gateway to the instant upstream
(bench/instant_server.py, its own process), for S steps, with transcripts on and off, in one
run (on/off alternated, ABBA, so both meet the same background load).

Printed per S: the bytes the agent sent in all (grows with S²), the transcript's bytes on disk
(blobs + call rows) and its ratio to one copy of everything sent, the transcript bytes per step
(flat when the growth is linear: only the 64-byte digest per message per call grows with the
history), and the gateway's median latency per call with transcripts on against off.

Usage::

    .venv/bin/python bench/transcript_growth.py [--steps 10,40,160] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from assay.models.gateway.service import Gateway, Upstream  # noqa: E402

TOOL_RESULT = "x" * 2000
SYSTEM = "You are a careful coding agent. " * 200


def agent(base_url: str, token: str, steps: int) -> tuple[int, list[float]]:
    """Bytes sent, and per-call latency in ms."""
    history: list[dict[str, object]] = [{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": "fix the bug"}]
    sent, lat = 0, []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as c:
        for i in range(steps):
            body = json.dumps({"model": "bench", "messages": history}).encode()
            sent += len(body)
            t0 = time.perf_counter()
            answer = c.post("/chat/completions", content=body,
                            headers={"Content-Type": "application/json"}).json()
            lat.append((time.perf_counter() - t0) * 1000)
            msg = answer["choices"][0]["message"]
            history.append({"role": "assistant", "content": msg["content"],
                            "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                                "name": "sh", "arguments": json.dumps({"cmd": f"ls {i}"})}}]})
            history.append({"role": "tool", "tool_call_id": f"c{i}",
                            "content": f"{i}: {TOOL_RESULT}"})
    return sent, lat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10,40,160")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, str(HERE / "instant_server.py"), "--port", "0",
                               "--exit-on-stdin-eof"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        upstream = Upstream(f"http://127.0.0.1:{port}/v1", "real-bench-key")
        with tempfile.TemporaryDirectory(prefix="transcript-bench-") as tmp, Gateway() as gw:
            n = 0
            for steps in (int(s) for s in args.steps.split(",")):
                lat: dict[bool, list[float]] = {True: [], False: []}
                size = sent = 0
                for r in range(args.rounds):
                    for on in ((True, False) if r % 2 == 0 else (False, True)):
                        n += 1
                        adir = Path(tmp) / f"a{n}"
                        token = gw.open_attempt(f"a{n}", ledger_path=adir / "model_calls.jsonl",
                                                upstream=upstream, model="bench",
                                                transcripts=on)
                        sent, ms = agent(gw.base_url, token, steps)
                        gw.close_attempt(token)
                        lat[on] += ms
                        if on:
                            size = sum(p.stat().st_size for p in adir.glob("transcript*.jsonl"))
                on_ms, off_ms = statistics.median(lat[True]), statistics.median(lat[False])
                rows.append((steps, sent, size, size / sent, size / steps, on_ms, off_ms))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(10)
    print(f"{'steps':>6} {'sent bytes':>12} {'kept bytes':>11} {'kept/sent':>9} "
          f"{'kept/step':>10} {'p50 on ms':>9} {'p50 off ms':>10} {'on/off':>6}")
    for steps, sent, size, ratio, per, on_ms, off_ms in rows:
        print(f"{steps:>6} {sent:>12,} {size:>11,} {ratio:>9.3f} {per:>10,.0f} "
              f"{on_ms:>9.2f} {off_ms:>10.2f} {on_ms / off_ms:>6.2f}")
    first, last = rows[0], rows[-1]
    growth = (last[4] / first[4]) if first[4] else float("nan")
    print(f"kept bytes per step, {last[0]} steps against {first[0]}: x{growth:.2f} "
          "(1.0 is linear growth; storing bodies as sent would be "
          f"x{(last[1] / last[0]) / (first[1] / first[0]):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
