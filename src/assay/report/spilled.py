"""Long lists of a report kept on disk while the report is built, written and rendered.

A narrow report lists every case it got wrong with every repeat's answers and the case's
input: tens of thousands of nested objects on a big suite, several hundred megabytes as Python
dicts, where the figures beside them need a few megabytes. :class:`SpilledList` holds such a
list in an anonymous temporary file (one compact JSON line per item) and keeps only each
item's place in memory; it reads as a sequence (``len``, indexing, slicing, iteration, ``==``
with a list), one item at a time, and a report record checks it item by item
(``records.report.ReportRecord.checked``).

:func:`json_chunks` writes a report holding spilled lists exactly as
``json.dumps(report, indent=2, ...)`` would (the bytes on disk do not change), one item at a
time. ``json.dumps`` itself does not take a spilled list: ``list(value)`` reads it whole.
"""

from __future__ import annotations

import json
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, overload


class SpilledList(Sequence[dict[str, Any]]):
    """A read-only list of JSON objects in an anonymous temporary file, in a chosen order."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="assay-spill-")
        weakref.finalize(self, self._file.close)
        self._offsets = array("q")
        self._lengths = array("q")
        self._order: array[int] | None = None

    def add(self, item: dict[str, Any]) -> int:
        """Append ``item`` (before :meth:`order`); returns its index in adding order."""
        data = json.dumps(item, ensure_ascii=True).encode("ascii") + b"\n"
        self._file.seek(0, 2)
        self._offsets.append(self._file.tell())
        self._lengths.append(len(data))
        self._file.write(data)
        return len(self._offsets) - 1

    def order(self, indices: Iterable[int]) -> None:
        """Read the items in this order (indices in adding order), once every item is added."""
        self._order = array("q", indices)
        if sorted(self._order) != list(range(len(self._offsets))):
            raise ValueError("order must name every item exactly once")
        self._file.flush()

    def _read(self, i: int) -> dict[str, Any]:
        at = i if self._order is None else self._order[i]
        self._file.seek(self._offsets[at])
        item: dict[str, Any] = json.loads(self._file.read(self._lengths[at]))
        return item

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._read(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("SpilledList index out of range")
        return self._read(index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._read(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpilledList | list | tuple):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[dict[str, Any]]:
        """A deep copy is an ordinary list (the file is not copied): read whole, mutable."""
        return list(self)

    def __repr__(self) -> str:
        return f"<SpilledList of {len(self)} items>"


def has_spilled(data: dict[str, Any]) -> bool:
    return any(isinstance(v, SpilledList) for v in data.values())


def _dumps(value: Any, ensure_ascii: bool) -> str:
    return json.dumps(value, indent=2, ensure_ascii=ensure_ascii, allow_nan=False)


def json_chunks(data: dict[str, Any], ensure_ascii: bool) -> Iterator[str]:
    """``json.dumps(data, indent=2, ensure_ascii=..., allow_nan=False) + "\\n"`` in pieces,
    with the top-level spilled lists written one item at a time: the same text, never whole
    in memory."""
    if not has_spilled(data):
        yield _dumps(data, ensure_ascii) + "\n"
        return
    if not data:
        yield "{}\n"
        return
    yield "{"
    for n, (key, value) in enumerate(data.items()):
        yield ("," if n else "") + "\n  " + json.dumps(key, ensure_ascii=ensure_ascii) + ": "
        if not isinstance(value, SpilledList):
            yield _dumps(value, ensure_ascii).replace("\n", "\n  ")
        elif not value:
            yield "[]"
        else:
            yield "["
            for i, item in enumerate(value):
                yield ("," if i else "") + "\n    " + _dumps(item, ensure_ascii).replace(
                    "\n", "\n    ")
            yield "\n  ]"
    yield "\n}\n"
