"""The ``mcode`` adapter against a **contract fixture**, not the real MiniMax Code CLI.

No registry these machines reach serves ``mcode`` (``@minimax-ai/code`` / ``@minimax/code``
answer 404, and it needs a newer Node than installed), so ``tests/support/mcode_fixture.py``
plays it: a program of the project's own, written from the documented headless contract
(``shared/ref/mcode-headless.md``), that really calls the model through the gateway, applies
the tool calls it is answered with and writes stream-json as specified, or one of the
malformed streams the adapter must name. A real ``mcode`` build would replace it by putting its
path in ``agent: "mcode:<path>"``; nothing else in these tests would change.

Real parts otherwise: a scripted upstream on loopback, the run's gateway with scoped tokens,
bubblewrap sandboxes with the model-proxy network, the real verifier.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli
from support.agent_cli import assert_no_secret, attempt_dir, needs_bwrap
from support.bundles import make_bundle
from support.scripted_server import Answer, RecordedRequest, ScriptedServer, Status

from assay.agents import MCode, parse_agent
from assay.agents.mcode.stream import ANOMALIES, read_stream, usage_check
from assay.report.outcomes import load_run_outcomes, stream_has_event

FIXTURE = Path(__file__).parent / "support" / "mcode_fixture.py"
FIX_CMD = "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"

# variant -> (anomaly it must be recorded with, execution status, failure code or None)
VARIANTS: dict[str, tuple[str | None, str, str | None]] = {
    "normal": (None, "succeeded", None),
    "sequence_gap": ("sequence_gap", "succeeded", None),
    "sequence_repeat": ("sequence_repeated", "succeeded", None),
    "ids_inconsistent": ("session_id_inconsistent", "succeeded", None),
    "truncated_last_line": ("truncated_last_line", "succeeded", None),
    "duplicate_terminal": ("duplicate_terminal_event", "succeeded", None),
    # crashes (exit 70) before applying the fix: exit code and stderr decide
    "missing_exec_completed": ("missing_exec_completed", "exited_nonzero", "no_change"),
    "wrong_schema_version": ("schema_version_unsupported", "succeeded", None),
    "usage_disagrees": ("usage_disagrees_with_gateway", "succeeded", None),
    "compaction": (None, "succeeded", None),
}


def _handler(req: RecordedRequest, n: int) -> Answer:
    """First call: a tool call that fixes the bug, the variant named in the content; after a
    tool result: the final answer. The variant comes from the arm's model name."""
    model = (req.body or {}).get("model", "")
    variant = model.removeprefix("mc-")
    if any(m.get("role") == "tool" for m in req.messages):
        return Answer("Fixed: add now adds.", model=model)
    return Answer(f"I will fix add.\nfixture-variant: {variant}", model=model,
                  tool_calls=[{"id": "call_fix", "type": "function", "function": {
                      "name": "shell", "arguments": json.dumps({"command": FIX_CMD})}}])


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch):
    with ScriptedServer(_handler) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        yield srv


# --------------------------------------------------------------- the fixture, run directly


def _run_fixture(tmp: Path, base_url: str, variant: str) -> subprocess.CompletedProcess[bytes]:
    ws = tmp / f"ws-{variant}"
    (ws / "src" / "calc").mkdir(parents=True)
    (ws / "src" / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    cfg = ws / "cfg.json"
    from assay.agents.mcode.adapter import provider_config

    cfg.write_text(json.dumps(provider_config(f"mc-{variant}", base_url)))
    env = {"PATH": os.environ["PATH"], "OPENAI_API_KEY": "scoped-token",
           "MCODE_FIXTURE_VARIANT": "normal"}
    return subprocess.run(
        [sys.executable, str(FIXTURE), "exec", "--cwd", str(ws), "--config", "cfg.json",
         "--input", "-", "--output-format", "stream-json", "--timeout", "20s",
         "--max-steps", "5"], input=b"fix add", capture_output=True, env=env, timeout=60)


def test_the_fixture_speaks_the_contract_and_each_variant_is_named(tmp_path: Path,
                                                                  upstream) -> None:
    for variant, (anomaly, _, _) in VARIANTS.items():
        proc = _run_fixture(tmp_path, upstream.base_url, variant)
        reading = read_stream(proc.stdout)
        if variant == "missing_exec_completed":
            assert proc.returncode == 70 and b"mcode exec failed" in proc.stderr
        else:
            assert proc.returncode == 0, (variant, proc.stderr)
        if anomaly is None or anomaly == "usage_disagrees_with_gateway":
            assert reading.anomalies == {}, (variant, reading.notes)
        else:
            assert anomaly in reading.anomalies, (variant, reading.anomalies)
        if variant == "normal":
            assert reading.result is not None and reading.result["status"] == "succeeded"
            assert reading.result["usageSource"] == "completed_responses"
            assert reading.result["usageIncomplete"] is False
            # deltas merged by item id; the completed content replaces them
            msgs = [i for i in reading.items.values() if i["type"] == "agent_message"]
            assert [m["content"] for m in msgs] == ["I will fix add.\nfixture-variant: normal",
                                                   "Fixed: add now adds."]
            [tool] = [i for i in reading.items.values() if i["type"] == "tool_call"]
            assert tool["id"] == "call_fix" and tool["toolCall"]["status"] == "completed"
            lines = [json.loads(x) for x in proc.stdout.splitlines()]
            assert [x["sequence"] for x in lines] == list(range(1, len(lines) + 1))
            assert lines[-1]["type"] == "exec.completed"
            assert lines[-2]["type"] == "turn.completed"
            assert (tmp_path / "ws-normal/src/calc/__init__.py").read_text().count("a + b")
        if variant == "compaction":
            assert reading.compaction_events == 1
            assert reading.result is not None and reading.result["usageIncomplete"] is True
    # the scoped token from the config's ${OPENAI_API_KEY}, never anything else
    assert {r.headers["authorization"] for r in upstream.chat_requests()} == {
        "Bearer scoped-token"}


def test_stream_reader_names_what_the_fixture_cannot_produce() -> None:
    """Breaks the fixture has no reason to make, built by hand from a good stream."""
    base = {"schemaVersion": 1, "timestampMs": 1, "runId": "exec_t", "sessionId": "s",
            "turnId": "t"}
    good = [{**base, "sequence": i + 1, "type": t} for i, t in enumerate(
        ["exec.started", "session.started", "turn.started", "turn.completed"])]
    result = {"type": "exec.result", "status": "succeeded", "runId": "exec_t",
              "sessionId": "s", "turnId": "t",
              "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 9}}
    good.append({**base, "sequence": 5, "type": "exec.completed", "result": result})
    extra = {**base, "sequence": 6, "type": "mystery"}
    raw = b"".join(json.dumps(e).encode() + b"\n" for e in [*good, extra]) + b"not json\n"
    reading = read_stream(raw)
    assert {"unknown_event_type", "exec_completed_not_last", "usage_total_mismatch",
            "truncated_last_line"} <= set(reading.anomalies)
    assert set(reading.anomalies) <= set(ANOMALIES)
    # usage: a lower bound only disagrees by claiming more than the gateway saw
    gw = {"input": 10, "cached_input": 0, "output": 4, "calls": 2, "usage_missing_calls": 0}
    assert usage_check({"inputTokens": 10, "outputTokens": 4}, False, gw)["agrees"] is True
    assert usage_check({"inputTokens": 5, "outputTokens": 4}, False, gw)["agrees"] is False
    assert usage_check({"inputTokens": 5, "outputTokens": 4}, True, gw)["agrees"] is True
    assert usage_check(None, None, gw)["comparable"] is False


def test_the_cli_binary_is_found_or_the_spec_is_refused(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_MCODE_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match="no CLI found"):
        parse_agent("mcode")
    with pytest.raises(ValueError, match="not an executable"):
        parse_agent(f"mcode:{tmp_path / 'nothing'}")
    monkeypatch.setenv("ASSAY_MCODE_BIN", str(FIXTURE))
    agent = parse_agent("mcode")
    assert isinstance(agent, MCode) and agent.bin == FIXTURE
    ident = agent.describe()
    assert ident["bin_sha256"] == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert "stream-json" in ident["flags"]


@needs_bwrap
def test_without_a_model_the_trial_is_not_run(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "calc")
    res = run_cli(["trial", "run", str(bundle), "--agent", f"mcode:{FIXTURE}",
                   "--out", str(tmp_path / "t")])
    assert res.code == 3 and "mcode needs a model" in res.stdout + res.stderr


# --------------------------------------------------------------- through the runner


def _experiment(root: Path) -> Path:
    bundle = make_bundle(root / "tasks" / "calc")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", "network_policy: model-proxy-only"))
    arms = "\n".join(
        f"  {v}:\n    agent: \"mcode:{FIXTURE}\"\n"
        f"    model: {{name: mc-{v}, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}}"
        + ("\n    trigger_event: compaction" if v == "compaction" else "")
        for v in VARIANTS)
    exp = root / "experiment.yaml"
    exp.write_text(f"name: mcode-contract\ntasks: [tasks]\nrepetitions: 1\nseed: 1\n"
                   f"concurrency: 2\narms:\n{arms}\n")
    return exp


@needs_bwrap
def test_every_stream_through_sandbox_and_gateway(tmp_path: Path, upstream) -> None:
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(_experiment(tmp_path)), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    for variant, (anomaly, status, failure) in VARIANTS.items():
        adir = attempt_dir(out, variant)
        trial: dict[str, Any] = json.loads((adir / "trial.json").read_text())
        ex = trial["execution"]
        assert ex["status"] == status, (variant, ex)
        assert trial["grade"]["accepted"] is (failure is None), (variant, trial["grade"])
        assert trial["grade"]["failure_code"] == failure, variant
        if anomaly is None:
            assert ex["anomalies"] == {} and ex["evidence_gap"] is False, (variant, ex)
        else:
            assert anomaly in ex["anomalies"] and ex["evidence_gap"] is True, (variant, ex)
        assert trial["agent_identity"]["adapter"] == "assay.mcode/1"
        report = ex["agent_report"]
        assert report["cli_version"].startswith("mcode-contract-fixture")
        assert "--max-steps" in report["argv"] and "10" in report["argv"]
        # the CLI's own limit sits below the runner's watchdog (agent_wall_seconds: 30)
        assert report["timeout_seconds"] < 30
        # the raw stream is kept as received, byte for byte
        raw = (adir / "agent" / "stdout.log").read_bytes()
        assert hashlib.sha256(raw).hexdigest() == report["stream_sha256"] and raw
        cfg = json.loads((adir / "agent" / "mcode-config.yaml").read_text())
        assert cfg["custom_provider"]["assay-gateway"]["options"]["apiKey"] == \
            "${OPENAI_API_KEY}"
        assert hashlib.sha256((adir / "agent" / "mcode-config.yaml").read_bytes()) \
            .hexdigest() == report["config_sha256"]

    # the adapter's configuration is in the manifest beside each arm
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["normal"]["agent_identity"]["bin_sha256"] == \
        hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    normal = json.loads((attempt_dir(out, "normal") / "trial.json").read_text())["execution"]
    # usage claimed by the agent beside the gateway's ledger, and they agree
    assert normal["agent_usage"]["usageSource"] == "completed_responses"
    assert normal["agent_usage"]["usageIncomplete"] is False
    assert normal["model_usage"]["calls"] == 2
    assert normal["usage_check"]["comparable"] and normal["usage_check"]["agrees"]
    assert normal["agent_report"]["agent_status"] == "succeeded"
    assert normal["agent_report"]["stream"]["items"]["tool_calls"][0]["name"] == "shell"
    bad = json.loads((attempt_dir(out, "usage_disagrees") / "trial.json").read_text())
    assert bad["execution"]["usage_check"]["agrees"] is False
    crash = json.loads((attempt_dir(out, "missing_exec_completed") / "trial.json").read_text())
    assert crash["execution"]["exit_code"] == 70
    assert "fixture crash" in crash["execution"]["agent_report"]["stderr_tail"]
    assert crash["execution"]["agent_usage"] is None  # no claim, not a zero
    schema = json.loads((attempt_dir(out, "wrong_schema_version") / "trial.json").read_text())
    assert schema["execution"]["agent_report"]["stream"]["interpreted"] is False
    # compaction counted, usage marked incomplete, and visible to trigger_event: compaction
    comp = json.loads((attempt_dir(out, "compaction") / "trial.json").read_text())["execution"]
    assert comp["compaction_events"] == 1 and comp["agent_usage"]["usageIncomplete"] is True
    assert stream_has_event(attempt_dir(out, "compaction"), "compaction") is True
    assert stream_has_event(attempt_dir(out, "normal"), "compaction") is False
    outcomes = {t.outcome.arm: t.outcome for t in load_run_outcomes(out).trials}
    assert outcomes["compaction"].triggered is True and outcomes["normal"].triggered is None
    # every call went upstream with the real key, and none of the run's files holds it
    assert len(upstream.chat_requests()) == 2 * len(VARIANTS) - 1
    assert {r.headers.get("authorization") for r in upstream.chat_requests()} == {
        f"Bearer {SECRET}"}
    assert_no_secret(out)


# --------------------------------------------------------------- failures onto the taxonomy


def _failing_handler(req: RecordedRequest, n: int) -> Answer | Status:
    model = (req.body or {}).get("model", "")
    if model == "mc-error":
        return Status(400, body='{"error": {"message": "scripted refusal"}}')
    if model == "mc-slow":
        return Answer("too late", model=model, delay=8)
    # mc-steps: never a final answer, so --max-steps ends the turn
    return Answer("again", model=model, tool_calls=[{"id": f"c{len(req.messages)}",
                  "type": "function", "function": {"name": "shell",
                                                   "arguments": '{"command": "true"}'}}])


@needs_bwrap
def test_the_cli_limits_and_errors_end_with_the_right_codes(tmp_path: Path) -> None:
    """The CLI's own ``--max-steps`` and ``--timeout`` and a refused model call, each through a
    real sandbox whose network leads straight to the scripted upstream (no gateway here, so it
    is the CLI's limit that ends the turn, not the gateway's)."""
    from assay.runner.trial import TrialHooks, run_trial
    from assay.sandbox import ProxyTarget
    from assay.suites.bundle import load_bundle

    quick = load_bundle(make_bundle(tmp_path / "quick"))
    slow = load_bundle(make_bundle(tmp_path / "slow", agent_seconds=6))
    agent = parse_agent(f"mcode:{FIXTURE}")
    want = {"mc-steps": (quick, "budget_exhausted", "limit_exceeded", 7),
            "mc-slow": (slow, "agent_timeout", "timeout", 6),
            "mc-error": (quick, "exited_nonzero", "failed", 4)}
    with ScriptedServer(_failing_handler) as srv:
        for model, (bundle, status, agent_status, code) in want.items():
            hooks = TrialHooks()
            hooks.proxy = ProxyTarget(tcp=("127.0.0.1", srv.port))
            hooks.model_env = {"OPENAI_BASE_URL": hooks.proxy.base_url + "/v1",
                               "OPENAI_API_KEY": "scoped-token", "ASSAY_MODEL": model}
            res = run_trial(bundle, agent, tmp_path / model, hooks=hooks)
            ex = res.record.execution
            assert ex["status"] == status, (model, ex)
            assert ex["exit_code"] == code and ex["ended_by"] == "agent", (model, ex)
            assert ex["agent_report"]["agent_status"] == agent_status, model
            assert ex["anomalies"] == {}, (model, ex["anomalies"])
            assert ex["usage_check"] == {"comparable": False,
                                         "reason": "no gateway ledger for this attempt"}
            assert res.grade is not None
            if status in ("budget_exhausted", "agent_timeout"):
                assert res.grade.failure_code == status
            else:
                assert res.grade.failure_code == "no_change"
                assert ex["agent_report"]["error"]["category"] == "runtime"
                assert "mcode exec failed" in ex["agent_report"]["stderr_tail"]
            assert ex["agent_usage"]["usageIncomplete"] is True  # not succeeded: a lower bound
        steps = [r for r in srv.chat_requests() if r.body and r.body["model"] == "mc-steps"]
        assert len(steps) == 11  # the message after the 10th (assistant_steps: 10) ends it


def test_without_exec_completed_the_exit_code_decides(tmp_path: Path) -> None:
    """The contract's exit codes, when nothing on stdout says what happened (a pre-turn
    error writes nothing there): ours to fix (2, 3) is infrastructure, 6 and 7 the agent's."""
    from assay.agents.base import AgentRun
    from assay.agents.mcode.adapter import _collect

    empty = tmp_path / "stdout.log"
    empty.write_bytes(b"")
    for code, status in {2: "infra_error", 3: "infra_error", 6: "agent_timeout",
                         7: "budget_exhausted", 70: "exited_nonzero",
                         130: "exited_nonzero"}.items():
        run = _collect(AgentRun(status="exited_nonzero", exit_code=code,
                                reason="nonzero_exit"), empty, {})
        assert run.status == status, code
        assert run.extra["anomalies"] == {"missing_exec_completed": 1}
        assert run.extra["agent_usage"] is None
    # the sandbox's verdict (a watchdog kill) outranks the stream
    killed = _collect(AgentRun(status="agent_timeout", exit_code=None, reason="timeout"),
                      empty, {})
    assert killed.status == "agent_timeout"


@needs_bwrap
def test_a_resume_with_another_cli_build_is_refused(tmp_path: Path, upstream) -> None:
    cli = tmp_path / "bin" / "mcode"
    cli.parent.mkdir()
    cli.write_bytes(FIXTURE.read_bytes())
    cli.chmod(0o755)
    bundle = make_bundle(tmp_path / "tasks" / "calc")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", "network_policy: model-proxy-only"))
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"name: mcode-build\ntasks: [tasks]\narms:\n  normal:\n    agent: "
                   f"\"mcode:{cli}\"\n    model: {{name: mc-normal, base_url_env: TEST_UPSTREAM, "
                   "api_key_env: TEST_KEY}\n")
    out = tmp_path / "run"
    assert run_cli(["exp", "run", str(exp), "--out", str(out)]).code == 0
    assert run_cli(["exp", "run", str(exp), "--out", str(out)]).code == 0  # same build resumes
    cli.write_bytes(FIXTURE.read_bytes() + b"\n# another build\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 2
    assert "agent_identities.normal.bin_sha256" in " ".join(res.stderr.split())
