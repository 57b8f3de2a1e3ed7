"""Pipe pumping on its own: bounded tails, the on-disk cap, bwrap's status documents, and a
real child that writes more than a pipe holds while its stdin is still being fed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from assay.sandbox import TAIL_BYTES
from assay.sandbox.bwrap import parse_json_status
from assay.sandbox.pipes import OutputSink, PipePump


def test_sink_counts_everything_tails_the_end_and_caps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    sink = OutputSink(path, cap=10)
    try:
        for chunk in (b"0123456", b"789abcdef", b"x" * (TAIL_BYTES + 5), b"END"):
            sink.write(chunk)
    finally:
        sink.close()
    assert sink.total == 7 + 9 + TAIL_BYTES + 5 + 3
    assert len(sink.tail) == TAIL_BYTES and sink.text().endswith("xxEND")
    assert path.read_bytes() == b"0123456789" and sink.kept == 10 and sink.truncated


def test_sink_without_file_is_never_truncated() -> None:
    sink = OutputSink(None, cap=0)
    sink.write(b"\xff\xfeok")
    sink.close()
    assert sink.total == 4 and not sink.truncated and sink.text() == "\ufffd\ufffdok"


def test_bwrap_status_documents_merge() -> None:
    raw = b'{ "child-pid": 42 }\n{"exit-code": 3, "x": [1]}\n[1, 2]\n{"exit-co'
    assert parse_json_status(raw) == {"child-pid": 42, "exit-code": 3, "x": [1]}
    assert parse_json_status(b"") == {} and parse_json_status(b"  \n") == {}
    assert parse_json_status(b"not json") == {}


def test_pump_feeds_stdin_and_drains_more_than_a_pipe_holds() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, far more than a pipe buffer
    code = ("import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); "
            "sys.stderr.write('n=%d' % len(d))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = OutputSink(None, 0), OutputSink(None, 0)
    pump = PipePump(proc, payload, out, err, None)
    try:
        pump.pump(time.monotonic() + 30, lambda: pump.exited and not pump.readers)
    finally:
        pump.close()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
    assert pump.exited and pump.exit_time is not None and proc.returncode == 0
    assert out.total == len(payload) and bytes(out.tail) == payload[-TAIL_BYTES:]
    assert err.text() == f"n={len(payload)}"


def test_pump_survives_a_child_that_never_reads_its_stdin() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "print('bye')"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = OutputSink(None, 0), OutputSink(None, 0)
    pump = PipePump(proc, b"z" * (4 << 20), out, err, None)
    try:
        pump.pump(time.monotonic() + 30, lambda: pump.exited and not pump.readers)
    finally:
        pump.close()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
    assert pump.exited and proc.returncode == 0 and out.text() == "bye\n"
