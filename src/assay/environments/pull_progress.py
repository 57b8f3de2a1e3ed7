"""What ``assay env pull`` says while it runs: the fetch, then the unpack, with an ETA.

skopeo copies an image's blobs with ``--quiet`` (its own progress bars are for a terminal and
garble a CI log), so a pull of a large image would otherwise be minutes of silence. The copy
writes each blob into its ``dir:`` folder as it arrives; :class:`CopyWatch` measures that
folder while skopeo runs and says how many bytes of the manifest's total have arrived, how
many blobs are whole, and an ETA from this pull's own pace. Silent for a quick pull (the
first line after ``QUIET_SECONDS``), then a line at most every ``QUIET_SECONDS``.

The unpack says ``layer i/N`` per layer (``oci.import_image``); :func:`unpack_eta` adds the
time left, weighing each layer by its compressed size from the manifest (a big layer takes
longer), where those sizes are known. Inside a layer that takes longer than ``QUIET_SECONDS``
(:class:`Ticker`), ``unpacking layer i/N: … of … read, ETA …`` (``env build`` too).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.suites.limits import describe_bytes, eta_text

#: a pull quicker than this says nothing while fetching; a slower one a line this often
QUIET_SECONDS = 2.0
#: a blob skopeo has finished: named by its hex digest (a partial one has a temporary name)
_BLOB = re.compile(r"[0-9a-f]{64}")
_LAYER = re.compile(r"^layer (\d+)/(\d+)\b")


def blob_sizes(doc: dict[str, Any]) -> list[int] | None:
    """The sizes of the config and layers an image manifest lists (what skopeo will fetch),
    or None when any is missing or not a whole number: then no total is claimed."""
    entries = [doc.get("config"), *(doc.get("layers") or [])]
    sizes = [e.get("size") if isinstance(e, dict) else None for e in entries]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sizes):
        return None
    return [int(s) for s in sizes if s is not None]


class CopyWatch:
    """Measures skopeo's ``dir:`` folder while the copy runs; :meth:`poll` is called about
    every quarter second and says a line when one is due."""

    def __init__(self, folder: Path, sizes: list[int] | None, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder, self.sizes, self.say, self.clock = folder, sizes, say, clock
        self.started = self.last = clock()

    def measure(self) -> tuple[int, int]:
        """Bytes in the folder so far (partial blobs included) and blobs already whole."""
        got = whole = 0
        try:
            entries = list(os.scandir(self.folder))
        except OSError:  # not made yet
            return 0, 0
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    got += entry.stat(follow_symlinks=False).st_size
                    whole += bool(_BLOB.fullmatch(entry.name))
            except OSError:  # renamed while we looked
                continue
        return got, whole

    def line(self, got: int, whole: int, elapsed: float) -> str:
        """``fetched 40 MiB of 120 MiB, 1/3 blobs, ETA 1m10s`` (no total: bytes so far)."""
        if not self.sizes:
            return f"fetched {describe_bytes(got)} so far"
        total = sum(self.sizes)
        text = (f"fetched {describe_bytes(min(got, total))} of {describe_bytes(total)}, "
                f"{min(whole, len(self.sizes))}/{len(self.sizes)} blobs")
        if 0 < got < total and elapsed > 0:
            text += f", ETA {eta_text(elapsed, got, total - got)}"
        return text

    def poll(self) -> None:
        now = self.clock()
        if now - self.started < QUIET_SECONDS or now - self.last < QUIET_SECONDS:
            return
        self.last = now
        got, whole = self.measure()
        self.say(self.line(got, whole, now - self.started))


class Ticker:
    """Lines for one long step whose bytes are counted as they go (a layer being unpacked):
    silent for ``QUIET_SECONDS``, then ``LABEL: 120 MiB of 300 MiB read, ETA 3s`` at most
    every ``QUIET_SECONDS``. A small image's layers say nothing more than their closing line."""

    def __init__(self, label: str, total: int | None, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.say, self.clock = label, total, say, clock
        self.started = self.last = clock()

    def tick(self, done: int) -> None:
        now = self.clock()
        if now - self.started < QUIET_SECONDS or now - self.last < QUIET_SECONDS:
            return
        self.last = now
        if not self.total:
            self.say(f"{self.label}: {describe_bytes(done)} read")
            return
        text = f"{self.label}: {describe_bytes(min(done, self.total))} of " \
               f"{describe_bytes(self.total)} read"
        if 0 < done < self.total:
            text += f", ETA {eta_text(now - self.started, done, self.total - done)}"
        self.say(text)


def unpack_eta(say: Callable[[str], None], layer_sizes: list[int] | None,
               clock: Callable[[], float] = time.monotonic) -> Callable[[str], None]:
    """``say`` with the time left added to each ``layer i/N`` line of the unpack (from the
    pace so far, each layer weighed by its compressed size); other lines pass as they are."""
    started = clock()

    def told(line: str) -> None:
        m = _LAYER.match(line)
        if m and layer_sizes and int(m.group(2)) == len(layer_sizes):
            i, n = int(m.group(1)), int(m.group(2))
            done, total = sum(layer_sizes[:i]), sum(layer_sizes)
            elapsed = clock() - started
            if i < n and done > 0 and elapsed > 0:
                line += f" (ETA {eta_text(elapsed, done, total - done)})"
        say(line)
    return told
