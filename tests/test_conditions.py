"""The conditions per arm (report/conditions.py), read from a run directory's real files: each
attempt's ``model_calls.jsonl`` and the run's ``gateway_events.jsonl``, written here as the
gateway writes them (one JSON row a line, the keys it writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.report.conditions import conditions_markdown, run_conditions


def _call(minute: int, *, status: int = 200, by: str | None = None, inp: int | None = 100,
          cached: int | None = 0) -> dict[str, Any]:
    return {"time": f"2026-12-06T10:{minute:02d}:00.000Z", "forwarded": True,
            "upstream_status": status, "throttled_by": by, "input_tokens": inp,
            "cached_input_tokens": cached}


def _write(run: Path, attempt: str, rows: list[dict[str, Any]]) -> None:
    path = run / "trials" / attempt / "model_calls.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _events(run: Path, rows: list[dict[str, Any]]) -> None:
    (run / "gateway_events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_matching_arms_give_figures_and_no_warning(tmp_path: Path) -> None:
    _write(tmp_path, "t1/A/0/a1", [_call(1, cached=50), _call(2, status=429, by="others",
                                                             inp=None, cached=None)])
    _write(tmp_path, "t2/A/0/a1", [_call(3, cached=0)])
    _write(tmp_path, "t1/B/0/a1", [_call(1, cached=40), _call(3, cached=0),
                                   _call(2, status=429, by="own", inp=None, cached=None)])
    _events(tmp_path, [{"reason": "head_cap", "attempt_id": "t1/B/0/a1", "count": 40},
                       {"reason": "malformed", "attempt_id": "t1/B/0/a1"}])
    out = run_conditions(tmp_path, ["A", "B"])
    a, b = out["arms"]["A"], out["arms"]["B"]
    assert (a["calls"], a["throttled"], a["throttled_by_others"]) == (3, 1, 1)
    assert a["cached_input_share"] == 50 / 200 and b["cached_input_share"] == 40 / 200
    assert a["window"] == ["2026-12-06T10:01:00.000Z", "2026-12-06T10:03:00.000Z"]
    assert b["refusals"] == {"head_cap": 40, "malformed": 1} and b["own_refusals"] == 41
    assert a["refusals"] == {} and b["ceiling_refusals"] == 0
    assert out["warnings"] == [] and out["ceiling"] == {}
    text = "\n".join(conditions_markdown(out))
    assert "| B | 3 | 1 (33.3%) | 0 | 41 / 0 (head_cap 40, malformed 1) | 20.0% |" in text


def test_a_ceiling_unequal_limits_and_apart_windows_are_warnings(tmp_path: Path) -> None:
    _write(tmp_path, "t1/A/0/a1", [_call(1, status=429) for _ in range(30)])
    _write(tmp_path, "t1/B/0/a1", [_call(40, cached=90) for _ in range(30)])
    _events(tmp_path, [{"reason": "gateway_share", "attempt_id": "t1/A/0/a1", "count": 7},
                       {"reason": "gateway_busy", "attempt_id": None, "count": 3}])
    out = run_conditions(tmp_path, ["A", "B"])
    assert out["ceiling"] == {"gateway_share": 7, "gateway_busy": 3}
    assert out["arms"]["A"]["ceiling_refusals"] == 7 and out["arms"]["A"]["own_refusals"] == 0
    warnings = out["warnings"]
    assert len(warnings) == 4, warnings
    assert "gateway-wide ceiling was hit (3 gateway_busy, 7 gateway_share)" in warnings[0]
    assert "429/overload rate differs between A (30/30) and B (0/30)" in warnings[1]
    assert "cache warmth" in warnings[2]
    assert "do not overlap" in warnings[3]


def test_unknown_stays_unknown(tmp_path: Path) -> None:
    """An arm without calls, or whose calls reported no token counts: null, never zero."""
    _write(tmp_path, "t1/A/0/a1", [_call(1, inp=None, cached=None)])
    out = run_conditions(tmp_path, ["A", "B"])  # B has no attempt at all; no events file
    assert out["arms"]["A"]["cached_input_share"] is None
    assert out["arms"]["B"]["throttled_rate"] is None and out["arms"]["B"]["window"] is None
    assert out["warnings"] == []


def test_an_attempts_own_refusals_are_on_its_trial_view(tmp_path: Path) -> None:
    """``trial show`` and the trial page read them from the run's events, the attempt's
    ledger and its execution record (the forwarder's claim)."""
    from assay.api.records import trial_view

    _write(tmp_path, "t1/A/0/a1", [_call(1, status=429, by="others"), _call(2)])
    _write(tmp_path, "t1/B/0/a1", [_call(1)])
    _events(tmp_path, [{"reason": "head_cap", "attempt_id": "t1/A/0/a1", "count": 40},
                       {"reason": "gateway_share", "attempt_id": "t1/A/0/a1", "count": 2},
                       {"reason": "malformed", "attempt_id": "t1/B/0/a1"}])
    adir = tmp_path / "trials" / "t1" / "A" / "0" / "a1"
    (adir / "trial.json").write_text(json.dumps({
        "trial_id": "t1/A/0", "attempt": "a1", "status": "done",
        "execution": {"network_applied": {"forwarder_refused_claim": 9000}}}))
    view = trial_view(adir)
    assert view.refusals == (
        "the gateway refused 40 of its connections or requests because of its own behaviour "
        "(head_cap 40); 2 refused because a gateway-wide ceiling was hit (gateway_share 2); "
        "the upstream answered 429/overloaded 1 time(s), 1 put down to other attempts' "
        "traffic; the forwarder in its sandbox closed 9000 connection(s) past the attempt's "
        "limit (its claim)")
    (tmp_path / "trials" / "t1" / "B" / "0" / "a1" / "trial.json").write_text("{}")
    other = trial_view(tmp_path / "trials" / "t1" / "B" / "0" / "a1")
    assert other.refusals == ("the gateway refused 1 of its connections or requests because "
                              "of its own behaviour (malformed 1)")
