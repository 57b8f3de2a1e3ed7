"""What every real agent CLI adapter shares (``assay.agents.cli_common``: finding the CLI, the
model it is given, noting anomalies, when a usage claim is not comparable; and
``assay.agents.cli_collect``: the collect steps), on their own: the adapters' tests drive them
through real CLIs, these pin what each step promises, so that a change to one shows here
before it shows as a record or a message that differs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from assay.agents import cli_collect, cli_common
from assay.agents.base import AgentRun
from assay.agents.cli_common import parse_jsonl


class _Reading:
    """A minimal stream reader: the objects of a JSONL stream and the breaks parse_jsonl names."""

    def __init__(self, raw: bytes) -> None:
        self.lines = 0
        self.anomalies: dict[str, int] = {}
        self.objects = parse_jsonl(raw, self)

    def flag(self, name: str, note: str) -> None:
        self.anomalies[name] = self.anomalies.get(name, 0) + 1

    def to_record(self) -> dict[str, Any]:
        return {"lines": self.lines, "objects": len(self.objects),
                "anomalies": dict(self.anomalies)}


def test_the_kept_stream_is_parsed_digested_and_recorded_in_order(tmp_path: Path) -> None:
    raw = b'{"type": "a"}\nnot json\n{"type": "b"}'
    path = tmp_path / "stdout.log"
    path.write_bytes(raw)
    report: dict[str, Any] = {"adapter": "x"}
    reading = cli_collect.kept_stream(path, report, _Reading)
    assert [k for k in report] == ["adapter", "stream", "stream_sha256"]
    assert report["stream_sha256"] == hashlib.sha256(raw).hexdigest()
    assert report["stream"] == {"lines": 3, "objects": 2, "anomalies": {
        "invalid_json_line": 1, "truncated_last_line": 1}}
    assert reading.anomalies == report["stream"]["anomalies"]
    # no stream at all is an empty one: digested as such, never a crash
    empty: dict[str, Any] = {}
    cli_collect.kept_stream(tmp_path / "missing.log", empty, _Reading)
    assert empty["stream"]["lines"] == 0
    assert empty["stream_sha256"] == hashlib.sha256(b"").hexdigest()


def test_only_an_ordinary_exit_is_the_clis_to_explain() -> None:
    for reason in ("ok", "nonzero_exit"):
        assert not cli_collect.ended_by_sandbox(AgentRun(status="succeeded", reason=reason))
    for reason in ("watchdog", "oom", "pids_limit", None):
        assert cli_collect.ended_by_sandbox(AgentRun(status="agent_timeout", reason=reason))


def test_settle_orders_the_record_and_keeps_both_accounts_of_a_changed_status() -> None:
    report = {"adapter": "x"}
    run = AgentRun(status="exited_nonzero", exit_code=1, reason="nonzero_exit",
                   detail="exit 1")
    out = cli_collect.settle(run, report, {"truncated_last_line": 1}, "budget_exhausted",
                             "cli: turn limit", turns=3, agent_usage=None)
    assert out is run and run.status == "budget_exhausted"
    assert run.detail == "cli: turn limit; exit 1"
    assert list(run.extra) == ["agent_report", "anomalies", "evidence_gap", "turns",
                               "agent_usage"]
    assert run.extra["agent_report"] is report and run.extra["evidence_gap"] is True
    # the order reaches the execution record as written
    rec = json.loads(json.dumps(run.to_record()))
    keys = list(rec)
    assert keys[keys.index("agent_report"):] == list(run.extra)
    # an unchanged status leaves the sandbox's detail alone; no anomaly, no evidence gap
    same = AgentRun(status="succeeded", exit_code=0, reason="ok")
    cli_collect.settle(same, {}, {}, "succeeded", "cli succeeded")
    assert same.status == "succeeded" and same.detail is None
    assert same.extra["evidence_gap"] is False
    # a changed status without a sandbox detail is the reason alone
    bare = AgentRun(status="succeeded", exit_code=0, reason="ok")
    cli_collect.settle(bare, {}, {}, "exited_nonzero", "cli: failed")
    assert bare.detail == "cli: failed"


def test_reconcile_gives_the_ledger_last_and_flags_a_disagreeing_claim() -> None:
    seen: list[tuple[Any, ...]] = []

    def check(*args: Any) -> dict[str, Any]:
        seen.append(args)
        claim, ledger = args[0], args[-1]
        return {"comparable": True, "agrees": claim == ledger["input_tokens"]}

    execution = {"anomalies": {"x": 1}, "model_usage": {"input_tokens": 5}}
    ok = cli_collect.reconcile_usage(execution, check, 5, "extra")
    assert seen == [(5, "extra", {"input_tokens": 5})]
    assert ok["usage_check"] == {"comparable": True, "agrees": True}
    assert ok["anomalies"] == {"x": 1} and "evidence_gap" not in ok
    bad = cli_collect.reconcile_usage(execution, check, 7)
    assert bad["anomalies"] == {"x": 1, "usage_disagrees_with_gateway": 1}
    assert bad["evidence_gap"] is True
    assert execution["anomalies"] == {"x": 1}  # the execution it was given is not changed


def test_the_cli_is_the_specs_path_else_the_envs_else_the_pinned_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "tool"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("not executable")
    pinned = tmp_path / "pinned"
    monkeypatch.delenv("ASSAY_TOOL_BIN", raising=False)

    def find(spec: str) -> Path:
        return cli_common.find_cli("tool", spec, "ASSAY_TOOL_BIN", lambda: pinned, "get it")

    # the pinned install is missing: the hint says how to get one
    with pytest.raises(ValueError, match=r"^tool: .*pinned is not an executable file \(get it\)$"):
        find("tool")
    monkeypatch.setenv("ASSAY_TOOL_BIN", str(plain))
    # a path the user gave is named, without the hint
    with pytest.raises(ValueError, match=r"plain is not an executable file$"):
        find("tool")
    assert find(f"tool: {exe} ") == exe  # the spec's path outranks the environment's
    monkeypatch.setenv("ASSAY_TOOL_BIN", str(exe))
    assert find("tool") == exe and find("tool:") == exe
    with pytest.raises(ValueError, match=r"none is not an executable file$"):
        find(f"tool:{tmp_path / 'none'}")


def test_an_arm_without_a_gateway_model_is_refused_before_the_cli_starts() -> None:
    full = {"OPENAI_BASE_URL": "http://gw/v1", "ASSAY_MODEL": "m", "OPENAI_API_KEY": "t"}
    assert cli_common.gateway_model(full) == ("http://gw/v1", "m")
    for missing in ("OPENAI_BASE_URL", "ASSAY_MODEL", "OPENAI_API_KEY"):
        env = {k: v for k, v in full.items() if k != missing}
        assert cli_common.gateway_model(env) is None, missing
    assert cli_common.gateway_model({**full, "ASSAY_MODEL": ""}) is None
    refused = cli_common.needs_model("tool")
    assert refused.status == "infra_error"
    assert refused.detail == ("tool needs a model: run it in an experiment arm with a model, "
                              "whose gateway gives it one")


def test_anomalies_are_counted_by_known_name_and_their_notes_capped() -> None:
    anomalies: dict[str, int] = {}
    notes: list[str] = []
    for i in range(25):
        cli_common.note_anomaly(anomalies, notes, ("gap",), "gap", f"line {i}")
    assert anomalies == {"gap": 25} and notes == [f"line {i}" for i in range(20)]
    with pytest.raises(AssertionError):  # a misspelt name is a bug of the reader
        cli_common.note_anomaly(anomalies, notes, ("gap",), "gaps", "x")


def test_a_usage_claim_without_a_claim_or_a_full_ledger_is_not_comparable() -> None:
    ledger = {"input": 3, "output": 4, "calls": 1}
    assert cli_common.not_comparable({"input_tokens": 3}, ledger) is None
    assert cli_common.not_comparable(None, ledger) == {"comparable": False,
                                                       "reason": "no usage claim"}
    assert cli_common.not_comparable({"input_tokens": 3}, None) == {
        "comparable": False, "reason": "no gateway ledger for this attempt"}
    assert cli_common.not_comparable({}, {**ledger, "usage_missing_calls": 1}) == {
        "comparable": False, "reason": "the gateway saw calls without usage"}
