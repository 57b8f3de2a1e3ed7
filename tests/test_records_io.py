"""Append-only logs and atomic files: torn tails, corruption, refusal to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.errors import NeverOverwrite
from assay.records.io import (
    JsonlAppender,
    TornRowWarning,
    atomic_write_json,
    iter_rows,
    torn_tail,
    write_new_text,
)


def write_lines(path: Path, lines: list[str], tail: bytes = b"") -> None:
    path.write_bytes("".join(line + "\n" for line in lines).encode() + tail)


def test_complete_log_has_no_torn_tail(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    write_lines(p, ['{"a": 1}', '{"a": 2}'])
    assert torn_tail(p) == (p.stat().st_size, b"")
    assert [r["a"] for r in iter_rows(p)] == [1, 2]


def test_last_line_without_newline_is_torn(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    write_lines(p, ['{"a": 1}'], tail=b'{"a": 2')
    valid, tail = torn_tail(p)
    assert tail == b'{"a": 2' and valid == len(b'{"a": 1}\n')
    # never dropped in silence: reported with the file and line, or handed to the caller
    with pytest.warns(TornRowWarning, match=r"rows.jsonl:2: the last line \(7 bytes\) was cut"):
        assert [r["a"] for r in iter_rows(p)] == [1]
    seen: list[bytes] = []
    assert [r["a"] for r in iter_rows(p, on_torn=seen.append)] == [1]
    assert seen == [b'{"a": 2']


def test_unparsable_last_line_with_newline_is_torn(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    write_lines(p, ['{"a": 1}', '{"a": '])
    valid, tail = torn_tail(p)
    assert tail == b'{"a": \n' and valid == len(b'{"a": 1}\n')
    with pytest.warns(TornRowWarning, match="rows.jsonl:2"):
        assert [r["a"] for r in iter_rows(p)] == [1]


def test_torn_line_longer_than_one_read_block(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    big = '{"raw": "' + "x" * 200_000  # cut short, far longer than the 64 KiB step
    write_lines(p, ['{"a": 1}'], tail=big.encode())
    valid, tail = torn_tail(p)
    assert valid == len(b'{"a": 1}\n') and tail == big.encode()


def test_corrupt_middle_line_raises_with_its_line_number(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    write_lines(p, ['{"a": 1}', "not json", '{"a": 3}'])
    with pytest.raises(ValueError, match=r"rows.jsonl:2: corrupt record line"):
        list(iter_rows(p))


def test_appender_repairs_a_torn_tail_and_appends_after_it(tmp_path: Path) -> None:
    p = tmp_path / "rows.jsonl"
    write_lines(p, ['{"a": 1}'], tail=b'{"a": 2, "b"')
    with JsonlAppender(p) as log:
        assert log.repaired_tail == b'{"a": 2, "b"'
        log.append({"a": 2})
    assert p.read_text() == '{"a": 1}\n{"a":2}\n'
    # what was cut off is kept beside the log, not dropped
    kept = [json.loads(x) for x in (tmp_path / "rows.jsonl.torn.jsonl").read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["text"] == '{"a": 2, "b"'
    assert kept[0]["offset"] == len(b'{"a": 1}\n') and kept[0]["bytes"] == 12


def test_appender_refuses_nan(tmp_path: Path) -> None:
    with JsonlAppender(tmp_path / "rows.jsonl") as log, pytest.raises(ValueError):
        log.append({"x": float("nan")})


def test_write_new_text_never_overwrites(tmp_path: Path) -> None:
    p = tmp_path / "grades" / "v1.json"
    write_new_text(p, "first\n")
    with pytest.raises(NeverOverwrite):
        write_new_text(p, "second\n")
    assert p.read_text() == "first\n"
    assert not [q for q in p.parent.iterdir() if q.name != "v1.json"]  # no temp file left


def test_atomic_json_survives_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    name = b"bad\xff".decode("utf-8", "surrogateescape")
    atomic_write_json(tmp_path / "x.json", {"path": name})
    assert json.loads((tmp_path / "x.json").read_text())["path"] == name


def test_a_ledger_counts_its_torn_row_as_a_call_with_unknown_usage(tmp_path: Path) -> None:
    """Also after a writer reopened it: the row it cut off, kept beside it, still counts."""
    from assay.models.ledger import LedgerFile, Syncer
    from assay.records.ledger import ledger_totals

    p = tmp_path / "model_calls.jsonl"
    row = {"forwarded": True, "usage_missing": False, "input_tokens": 10, "output_tokens": 5,
           "cost_usd": 0.5}
    line = json.dumps(row).encode()
    p.write_bytes(line + b"\n" + line[:20])
    sums = ledger_totals(p)
    assert sums["calls"] == 2 and sums["torn_rows"] == 1 and sums["usage_missing_calls"] == 1
    assert sums["unpriced_calls"] == 1 and sums["cost_usd"] == 0.5 and sums["input"] == 10

    syncer = Syncer()
    try:  # the gateway reopening it: the torn row is cut off, and kept beside the ledger
        led = LedgerFile(p, syncer)
        led.append(row)
        led.close()
    finally:
        syncer.stop()
    assert p.read_bytes() == line + b"\n" + json.dumps(row, separators=(",", ":")).encode() + b"\n"
    sums.update(calls=3, input=20, output=10, cost_usd=1.0)
    assert ledger_totals(p) == sums
