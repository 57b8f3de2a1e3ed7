"""The layer reader's second thread (src/assay/environments/readahead.py): the bytes come out
whole and in order, an error of the reading thread is raised by the read that reaches it, the
thread never runs more than its depth ahead of the reader, and close() leaves no thread behind
(also when the unpacker gives up half way). The unpacking through it is tested by every import
and pull test (tests/test_env_oci.py: bombs, damaged gzip, digests)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import threading
import time

import pytest

from assay.environments.readahead import ReadAhead


class Counted(io.RawIOBase):
    """A stream of ``total`` bytes that counts how far it has been read, and may fail at a
    given offset."""

    def __init__(self, total: int, *, fail_at: int | None = None) -> None:
        super().__init__()
        self.data = os.urandom(total)
        self.pos = 0
        self.fail_at = fail_at

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.fail_at is not None and self.pos >= self.fail_at:
            raise ValueError(f"broken at byte {self.pos}")
        n = len(self.data) - self.pos if n < 0 else n
        got = self.data[self.pos:self.pos + n]
        self.pos += len(got)
        return got


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "assay-layer-reader"]


def test_the_bytes_come_out_whole_and_in_order_and_the_hash_sees_them_all() -> None:
    source = Counted(5 * 1024 * 1024 + 123)
    seen = hashlib.sha256()
    out = bytearray()
    with ReadAhead(source, chunk=64 * 1024, on_chunk=seen.update) as ahead:
        while chunk := ahead.read(1000 if len(out) < 10_000 else 300_000):
            out += chunk
        assert ahead.read(10) == b""  # the end stays the end
    assert bytes(out) == source.data
    assert seen.hexdigest() == hashlib.sha256(source.data).hexdigest()
    assert not _readers()


def test_a_gzip_stream_inflated_on_the_thread_gives_the_same_bytes() -> None:
    plain = os.urandom(300_000) * 4
    decoded = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(plain)), mode="rb")
    with ReadAhead(decoded) as ahead:
        got = b"".join(iter(lambda: ahead.read(-1), b""))
    assert got == plain


def test_an_error_of_the_reading_thread_is_raised_by_the_read_that_reaches_it() -> None:
    source = Counted(1_000_000, fail_at=300_000)
    with ReadAhead(source, chunk=100_000) as ahead:
        got = b""
        with pytest.raises(ValueError, match="broken at byte 300000"):
            while True:
                got += ahead.read(-1)
        assert got == source.data[:300_000]  # everything before the failure came out first
        assert ahead.read(-1) == b""
    assert not _readers()


def test_the_thread_stays_within_its_depth_and_close_stops_it_half_way() -> None:
    source = Counted(10 * 1024 * 1024)
    ahead = ReadAhead(source, chunk=64 * 1024, depth=3)
    assert len(ahead.read(100)) == 100
    deadline = time.monotonic() + 5
    while source.pos < 5 * 64 * 1024 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # had it no bound, it would read on through the ten MiB now
    # one chunk handed out, three queued, one held by the thread waiting for room
    assert source.pos == 5 * 64 * 1024
    ahead.close()  # the unpacker gave up: no thread is left reading
    assert not _readers()
    stopped_at = source.pos
    time.sleep(0.1)
    assert source.pos == stopped_at
