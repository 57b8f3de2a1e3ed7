"""Issue 35's scenario end to end: two attempts at once, each in its own real bubblewrap sandbox
with ``network="model-proxy"``, each reaching the real gateway through its own channel; the
flooder's agent opens connections to its ``OPENAI_BASE_URL`` and sends an unfinished request
head on each (or opens and closes them as fast as it can), the victim's agent makes ten
ordinary chat calls. The upstream is a real HTTP server on loopback.

What must hold: every call of the victim succeeds, its median latency stays within a small
multiple of the same agent's unloaded run, and the flood is on the flooder's record: its
forwarder's claim of the connections it closed inside the sandbox, and the gateway's own
``refused`` events under the flooder's attempt id, none under the victim's.

Reduced form (the default): the flood of unfinished heads runs 2.5 s with up to 1,500
connections held (about 4 CPU-seconds). Full form: ``ASSAY_GATEWAY_FLOOD_FULL=1`` (``make
test-full``): 3,500 held, as in the issue's report, for 8 s, and the open/close churn through a
sandbox as well (the reduced form has it against the gateway directly).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.scripted_server import Answer, ScriptedServer

from assay.models.gateway.service import Gateway, Upstream
from assay.records.io import iter_rows
from assay.records.ledger import GatewayEvent
from assay.sandbox import ExecResult, Limits, ProxyTarget, bwrap_available, run_sandboxed

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FULL = os.environ.get("ASSAY_GATEWAY_FLOOD_FULL") == "1"
HELD, SECONDS = (3500, 8.0) if FULL else (1500, 2.5)
MODEL = "m"

FLOODER = r"""
import os, socket, sys, time
host, port = "127.0.0.1", int(os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])
held, churn, seconds = int(sys.argv[1]), sys.argv[2] == "1", float(sys.argv[3])
head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "
        + os.environ["OPENAI_API_KEY"] + "\r\n").encode()
keep, opened, end = [], 0, time.monotonic() + seconds
while time.monotonic() < end:
    if not churn and len(keep) >= held:  # keep `held` open: replace those closed on us
        alive = []
        for k in keep:
            try:
                k.setblocking(False)
                gone = k.recv(1, socket.MSG_PEEK) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                k.close()
            else:
                alive.append(k)
        keep = alive
        if len(keep) >= held:
            time.sleep(0.2)
        continue
    s = socket.socket()
    try:
        s.settimeout(0.5); s.connect((host, port)); s.sendall(head); opened += 1
    except OSError:
        s.close(); continue
    if churn:
        s.close()
    else:
        keep.append(s)
print(opened)
"""

VICTIM = r"""
import json, os, time, urllib.request, urllib.error
url = os.environ["OPENAI_BASE_URL"] + "/v1/chat/completions"
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
out = []
for _ in range(10):
    req = urllib.request.Request(url, data=body, headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            status = r.status; r.read()
    except urllib.error.HTTPError as e:
        status = e.code
    except Exception as e:
        status = repr(e)[:100]
    out.append([status, time.monotonic() - started])
    time.sleep(0.2)
print(json.dumps(out))
"""


@pytest.fixture
def upstream() -> Iterator[str]:
    with ScriptedServer(lambda _req, _n: Answer("ok")) as server:
        yield server.base_url


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short folder for the gateway's sockets (a socket path must stay under 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="fair-", dir="/tmp"))
    yield folder
    for leftover in folder.iterdir():
        leftover.unlink()
    folder.rmdir()


def _agent(code: str, args: list[str], gw: Gateway, token: str, work: Path,
           seconds: float) -> ExecResult:
    work.mkdir()
    proxy = ProxyTarget(unix_socket=gw.open_channel(token),
                        max_connections=gw.connections_per_attempt)
    return run_sandboxed(["python3", "-c", code, *args], work, network="model-proxy",
                         proxy=proxy, env={"OPENAI_API_KEY": token,
                                           "OPENAI_BASE_URL": proxy.base_url},
                         limits=Limits(wall_seconds=seconds, memory_mib=512, pids=64))


@pytest.mark.parametrize("churn", [False, pytest.param(True, marks=pytest.mark.skipif(
    not FULL, reason="full form only (ASSAY_GATEWAY_FLOOD_FULL=1): the churn is covered "
    "against the gateway directly in test_gateway_fairness.py"))],
    ids=["unfinished-heads", "open-close-churn"])
def test_a_flooding_agent_cannot_take_the_model_from_another(
        upstream: str, sockets: Path, tmp_path: Path, churn: bool) -> None:
    log = tmp_path / "gateway_events.jsonl"
    with Gateway(unix_socket=sockets / "gw.sock", log_path=log) as gw:
        def attempt(name: str) -> str:
            return gw.open_attempt(name, ledger_path=tmp_path / name / "model_calls.jsonl",
                                   upstream=Upstream(upstream, "sk-real"), model=MODEL)

        alone = _agent(VICTIM, [], gw, attempt("alone"), tmp_path / "w-alone", 60)
        flooder, victim = attempt("flooder"), attempt("victim")
        flood: dict[str, ExecResult] = {}
        thread = threading.Thread(target=lambda: flood.update(res=_agent(
            FLOODER, [str(HELD), "1" if churn else "0", str(SECONDS)], gw, flooder,
            tmp_path / "w-flood", SECONDS + 30)))
        thread.start()
        try:
            # the victim starts once the flood is on: the gateway has refused the flooder
            deadline = 200
            while not any(e.attempt_id == "flooder" for e in gw.events) and deadline:
                threading.Event().wait(0.05)
                deadline -= 1
            loaded = _agent(VICTIM, [], gw, victim, tmp_path / "w-victim", 60)
        finally:
            thread.join(120)
        for token in (flooder, victim):
            gw.close_attempt(token)
    res = flood["res"]
    assert res.reason == "ok" and int(res.stdout_tail.strip()) > 200, res.to_record()
    base = json.loads(alone.stdout_tail)
    under = json.loads(loaded.stdout_tail)
    assert [s for s, _ in base] == [200] * 10
    assert [s for s, _ in under] == [200] * 10, under  # every call of the victim
    median_alone = statistics.median(t for _, t in base)
    median_loaded = statistics.median(t for _, t in under)
    assert median_loaded < 5 * median_alone + 0.25, (median_alone, median_loaded)
    # the flood is on the flooder's record, and only there
    events = [GatewayEvent.model_validate(r) for r in iter_rows(log)]
    assert {e.attempt_id for e in events} == {"flooder"}, events
    if not churn:
        assert res.network_applied["forwarder_max_connections"] == 32
        assert res.network_applied["forwarder_refused_claim"] > 0, res.network_applied
        assert any(e.reason in ("head_cap", "connection_rate") for e in events), events
    assert loaded.network_applied["forwarder_refused_claim"] == 0
    assert len(list(iter_rows(tmp_path / "victim" / "model_calls.jsonl"))) == 10
