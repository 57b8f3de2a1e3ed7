"""Does reading an upstream's SSE stream cost time linear in its bytes, however it is cut?

The gateway reads every streamed answer on its one loop thread, through a meter (usage, the
terminal event) and, with transcripts on, the collector that reassembles it. An upstream
chooses how its bytes arrive: one event of several MiB a TCP segment at a time, or thousands of
tiny events per read. Were the unfinished rest joined and rescanned at every piece, the cost
would grow with the square of the event (a 4 MiB event in 1460-byte pieces took about 30 s of
the thread before ``wire.EventBuffer``).

Printed: for a 4 MiB single event and for 1 MiB of small events, each reader's time per piece
size, and its ratio to the same reader fed 64 KiB pieces in the same run (the baseline). Linear
reading keeps the ratios near 1 (a little more per piece, never ~45x for 45x more pieces).

Usage::

    .venv/bin/python bench/sse_split.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from assay.models.gateway.anthropic import AnthropicStreamMeter  # noqa: E402
from assay.models.gateway.protocols import ChatStreamMeter  # noqa: E402
from assay.models.gateway.reassemble import StreamCollector  # noqa: E402

PIECES = (64 * 1024, 8 * 1024, 1460)


def _event(delta: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": delta}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


STREAMS = {
    "one 4 MiB event": _event("x" * (4 << 20)),
    "1 MiB of small events": _event("y") * ((1 << 20) // len(_event("y"))),
}
READERS: dict[str, Callable[[], object]] = {
    "chat meter": lambda: ChatStreamMeter(hide_usage_event=False),
    "anthropic meter": AnthropicStreamMeter,
    "collector": lambda: StreamCollector("chat"),
}


def feed(make: Callable[[], object], data: bytes, size: int) -> float:
    reader = make()
    start = time.perf_counter()
    for i in range(0, len(data), size):
        reader.feed(data[i:i + size])  # type: ignore[attr-defined]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    print(f"| stream | reader | {' | '.join(f'{p} B pieces' for p in PIECES)} |")
    print("|---|---|" + "---|" * len(PIECES))
    for name, data in STREAMS.items():
        for reader, make in READERS.items():
            best = {p: min(feed(make, data, p) for _ in range(args.rounds)) for p in PIECES}
            base = best[PIECES[0]]
            cells = [f"{best[p] * 1000:.0f} ms ({best[p] / base:.1f}x)" for p in PIECES]
            print(f"| {name} | {reader} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
