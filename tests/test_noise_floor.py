"""``noise_floor: {arm: base}`` end to end: real experiment runs (real sandboxes, gateway and
verifier), the A/A copy scheduled interleaved and fingerprinted, and what ``exp verdict``,
``exp report`` and ``exp plan`` make of it, for a stable setup and an unstable one.

The unstable setup is a real kind of instability: shared state outside the trial. The arm's
agent asks a model (through the gateway) whether to fix the bug; the upstream, like a cache
that the first caller warms, answers "use plus" only to the first request it sees for a task
and "leave it" afterwards. With one attempt at a time and a seed under which the copy runs
before the arm in every block, the copy fixes every such task and the arm none: two copies of
one configuration differ by far more than chance allows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.bundles import make_bundle
from support.scripted_server import Answer, RecordedRequest, ScriptedServer

from assay.sandbox import bwrap_available
from assay.suites.bundle import set_fixture_digest, tree_digest
from assay.suites.experiment import aa_arm, load_experiment, plan

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

BAR = """bar:
  hoped_improvement: 0.2
  max_regression: 0.05
  baseline: base
  candidate: cand
"""

# asks the model through the gateway about its task; fixes the bug when told to, and always on
# the tasks named after "always=" (those it knows how to fix without asking)
AGENT = r"""
import json, os, subprocess, sys, urllib.request
task = os.environ["ASSAY_TASK_ID"]
always = set(sys.argv[1].split("=", 1)[1].split(","))
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["ASSAY_MODEL"],
                     "messages": [{"role": "user", "content": "fix add in " + task}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
text = json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"]
print("model said:", text)
if task in always or "plus" in text:
    subprocess.run(["sed", "-i", "s/return a - b/return a + b/", "src/calc/__init__.py"])
"""


def _tasks(root: Path, n: int, *, agent: bool) -> None:
    for i in range(n):
        bundle = make_bundle(root / "tasks" / f"t{i}", task_id=f"t{i}")
        if agent:
            y = bundle / "task.yaml"
            y.write_text(y.read_text().replace("network_policy: none",
                                               "network_policy: model-proxy-only"))
            (bundle / "repo" / "agent.py").write_text(AGENT)
            set_fixture_digest(bundle, tree_digest(bundle / "repo"))


def _exp(root: Path, base: str, *, seed: int = 1, model: bool = False) -> Path:
    model_line = ("\n    model: {name: scripted-model, base_url_env: TEST_UPSTREAM, "
                  "api_key_env: TEST_KEY}" if model else "")
    exp = root / "experiment.yaml"
    exp.write_text(f"""name: aa
tasks: [tasks]
select: {{split: dev}}
repetitions: 1
seed: {seed}
concurrency: 1
noise_floor: {{arm: base}}
arms:
  base:
    agent: "{base}"{model_line}
  cand:
    agent: oracle
prices:
  scripted-model: {{input: 0, output: 0}}
{BAR}""")
    return exp


@pytest.fixture
def first_caller_wins(monkeypatch: pytest.MonkeyPatch):
    seen: set[str] = set()

    def handler(req: RecordedRequest, n: int) -> Answer:
        task = str(req.messages[-1]["content"]).rsplit(" ", 1)[-1]
        first = task not in seen
        seen.add(task)
        return Answer("use plus" if first else "leave it")

    with ScriptedServer(handler) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        yield srv


def test_the_copy_is_an_arm_scheduled_interleaved_and_fingerprinted(tmp_path: Path) -> None:
    _tasks(tmp_path, 6, agent=False)
    exp = load_experiment(_exp(tmp_path, "nop"))
    copy = aa_arm("base")
    assert list(exp.spec.arms) == ["base", "cand", copy]
    assert exp.identity["arms"][copy] == exp.identity["arms"]["base"]
    assert exp.identity["settings"]["noise_floor"] == {"arm": "base"}
    order = plan(exp)
    assert len(order) == 18
    first = []
    for i in range(0, 18, 3):  # each (task, repetition) block holds all three arms together
        arms = [k.arm for k in order[i:i + 3]]
        assert sorted(arms) == ["base", "base~aa", "cand"]
        assert len({(k.task, k.rep) for k in order[i:i + 3]}) == 1
        first.append(min(("base", copy), key=arms.index))
    assert set(first) == {"base", copy}  # neither copy is always the earlier one


def test_noise_floor_arm_must_exist_and_the_key_is_exact(tmp_path: Path) -> None:
    _tasks(tmp_path, 2, agent=False)
    path = _exp(tmp_path, "nop")
    path.write_text(path.read_text().replace("noise_floor: {arm: base}",
                                             "noise_floor: {arm: baseline}"))
    res = run_cli(["exp", "run", str(path), "--out", str(tmp_path / "run")])
    err = " ".join(res.stderr.split())
    assert res.code == 2 and "noise_floor.arm" in err and "no arm 'baseline'" in err
    path.write_text(path.read_text().replace("noise_floor: {arm: baseline}",
                                             "noise_floor: {arms: base}"))
    res = run_cli(["exp", "run", str(path), "--out", str(tmp_path / "run")])
    assert res.code == 2 and "noise_floor.arms" in res.stderr
    assert not (tmp_path / "run").exists()


@needs_bwrap
def test_a_stable_setup_lets_the_verdict_accept(tmp_path: Path) -> None:
    """nop fails every task in both copies: Δ A/A = 0, no task flipped, stable; the candidate
    (oracle) passes all four: ACCEPT, with the noise floor shown beside Δ."""
    _tasks(tmp_path, 4, agent=False)
    exp = _exp(tmp_path, "nop")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["base~aa"]["agent"] == "nop"
    assert manifest["identity"]["arms"]["base~aa"] == manifest["identity"]["arms"]["base"]
    assert len(list(out.glob("trials/*/base~aa/0/a1"))) == 4
    res = run_cli(["exp", "verdict", str(out)])
    text = " ".join(res.stdout.split())
    assert res.code == 0, res.stdout + res.stderr
    assert "Verdict: ACCEPT" in text and "Noise floor (A/A: base against its interleaved " \
        "copy base~aa): Δ A/A = +0.0 pts" in text
    assert "0 of 4 task(s) flipped" in text and "the setup is stable" in text
    assert text.index("Noise floor") < text.index("no_regression")  # beside Δ, before checks
    v = json.loads(run_cli(["exp", "verdict", str(out), "--json"]).stdout)
    nf = v["noise_floor"]
    assert nf["stable"] is True and nf["delta"] == 0.0 and nf["flipped"] == []
    assert nf["n_tasks"] == 4 and nf["flip_share"] == 0.0
    assert {c["name"]: c["ok"] for c in v["verdict"]["checks"]}["noise_floor"] is True
    # the comparison of the two arms ignores the copy: base against cand, four tasks
    assert v["comparison"]["a"] == "base" and v["comparison"]["b"] == "cand"
    assert v["comparison"]["n_tasks"] == 4 and v["comparison"]["delta"] == 1.0
    rep = json.loads((out / "report.json").read_text())
    assert rep["noise_floor"]["stable"] is True and "base~aa" in rep["arms"]
    c = json.loads(run_cli(["exp", "compare", str(out), "--json"]).stdout)
    assert c["a"] == "base" and c["b"] == "cand" and c["noise_floor"]["stable"] is True
    res = run_cli(["exp", "compare", str(out)])
    assert res.code == 0 and "Noise floor (A/A" in res.stdout
    html = (out / "report.html").read_text()
    assert "Noise floor (A/A: base against its interleaved copy base~aa)" in html


def _seed_copy_first(root: Path, tasks: list[str]) -> int:
    """A seed under which the copy's trial comes before the arm's on every one of ``tasks``."""
    for seed in range(2000):
        order = plan(load_experiment(_exp(root, "x", seed=seed)))
        pos = {(k.task, k.arm): i for i, k in enumerate(order)}
        if all(pos[(t, "base~aa")] < pos[(t, "base")] for t in tasks):
            return seed
    raise AssertionError("no seed puts the copy first on every task")


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@needs_bwrap
def test_an_unstable_setup_is_never_accepted(tmp_path: Path, first_caller_wins) -> None:
    """Six tasks; the agent fixes t4 and t5 on its own and the others only when the model
    says so, which it does to the first caller per task. The copy runs first on t0-t3: A/A
    differences 1, 1, 1, 1, 0, 0 (mean 2/3, SE .2108, t(5) 2.5706: interval [+12.5, +120.9]
    pts with cluster t): it excludes 0. The candidate passes everything (Δ = 2/3 against base)
    and would be accepted on Δ alone; the verdict refuses and says the setup is unstable."""
    _tasks(tmp_path, 6, agent=True)
    seed = _seed_copy_first(tmp_path, ["t0", "t1", "t2", "t3"])
    exp = _exp(tmp_path, "command:python3 agent.py always=t4,t5", seed=seed, model=True)
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out), "-j", "1"])
    assert res.code == 0, res.stderr
    v = json.loads(run_cli(["exp", "verdict", str(out), "--json"]).stdout)
    nf = v["noise_floor"]
    assert nf["delta"] == pytest.approx(2 / 3)  # the copy (B) minus the arm (A)
    assert sorted(nf["flipped"]) == ["t0", "t1", "t2", "t3"]
    assert nf["flip_share"] == pytest.approx(4 / 6) and nf["stable"] is False
    assert v["comparison"]["delta"] == pytest.approx(2 / 3)
    assert v["verdict"]["decision"] != "accept"
    assert {c["name"]: c["ok"] for c in v["verdict"]["checks"]}["noise_floor"] is False
    res = run_cli(["exp", "verdict", str(out)])
    text = " ".join(res.stdout.split())
    assert res.code == 4, text
    assert "the setup itself is unstable" in text and "excludes 0" in text
    md = (out / "report.md").read_text()
    assert "the interval excludes 0: the setup itself is unstable" in " ".join(md.split())

    # exp plan from this pilot uses the measured floor: never below what the copies showed
    res = run_cli(["exp", "plan", str(out), "--a", "base", "--json"])
    assert res.code == 0, res.stderr
    p = json.loads(res.stdout)
    floor = p["noise_floor"]
    assert floor["mde_measured"] is not None and floor["mde_measured"] > 0
    assert p["mde"] is None or p["mde"] >= floor["mde_measured"]
    assert p["mde"] is None or p["mde"] >= (floor["mde_simulated"] or 0)
    line = run_cli(["exp", "plan", str(out), "--a", "base"]).stdout
    assert "measured noise floor (A/A on 6 tasks)" in " ".join(line.split())
    more = json.loads(run_cli(["exp", "plan", str(out), "--a", "base", "--tasks", "60",
                               "--json"]).stdout)
    # ten times the tasks: the measured floor shrinks by about √10
    assert more["noise_floor"]["mde_measured"] < floor["mde_measured"] / 2.5
    assert os.path.exists(out / "state.sqlite")
