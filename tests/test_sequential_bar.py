"""A sequential bar's parts without a run: the spending boundaries (against published values and
against a simulation of the looks they are for), what a look decides, the ``bar.sequential``
block of the experiment file (validated, hashed into ``bar_sha256``) and the task order the
runner follows (seeded, stratified by family, cut at the looks)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.errors import SuiteError
from assay.stats.sequential import (
    ACCEPT,
    CONTINUE,
    INCONCLUSIVE,
    REJECT,
    boundaries,
    look_levels,
    look_verdict,
    spent,
)
from assay.suites.experiment import bar_sha256, load_experiment, plan, task_order

FRACTIONS = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_pocock_type_boundaries_match_the_published_ones() -> None:
    # Jennison and Turnbull (2000), Table 7.6: Lan-DeMets Pocock-type, K = 5, α = 0.05
    got = boundaries(FRACTIONS, 0.05, "pocock")
    assert got == pytest.approx([2.438, 2.427, 2.410, 2.397, 2.386], abs=0.006)
    # O'Brien-Fleming-type: the first look is z_{α/2}/√t by definition, and later looks fall
    of = boundaries(FRACTIONS, 0.05, "obrien_fleming")
    assert of[0] == pytest.approx(1.959964 / 0.2**0.5, abs=1e-3)
    assert all(b < a for a, b in zip(of, of[1:], strict=False)) and of[-1] > 1.96


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_the_boundaries_spend_what_the_function_allows(spending: str) -> None:
    """Brownian paths observed at the looks (what the boundaries assume): the share that first
    crosses at each look is the spending function's increment, and the whole is α."""
    rng = np.random.default_rng(5)
    steps = rng.normal(0.0, np.sqrt(0.2), size=(200_000, 5)).cumsum(axis=1)
    z = steps / np.sqrt(np.array(FRACTIONS))
    cs = np.array(boundaries(FRACTIONS, 0.05, spending))  # type: ignore[arg-type]
    crossed = np.abs(z) >= cs
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    total = float((first >= 0).mean())
    assert total == pytest.approx(0.05, abs=0.003)
    for k, t in enumerate(FRACTIONS):
        want = spent(t, 0.05, spending) - spent(FRACTIONS[k - 1] if k else 0, 0.05,
                                                 spending)  # type: ignore[arg-type]
        assert float((first == k).mean()) == pytest.approx(want, abs=0.0025)


def test_levels_the_last_look_spends_the_rest_and_one_look_is_fixed() -> None:
    levels = look_levels([10, 20, 40], 40, spending="pocock")
    assert all(0.95 < lv < 1 for lv in levels) and levels[0] > levels[-1]
    assert look_levels([40], 40, spending="pocock") == [0.95]
    with pytest.raises(ValueError, match="whole plan"):
        look_levels([10, 20], 40, spending="pocock")


def test_what_a_look_decides() -> None:
    kw = {"hoped": 0.1, "max_regression": 0.05}
    # upper bound below the hoped improvement: reject, at any look
    assert look_verdict(0.0, -0.1, 0.05, last=False, **kw) == REJECT
    # the bar cleared and the interval above 0: accept early
    assert look_verdict(0.2, 0.02, 0.4, last=False, **kw) == ACCEPT
    # the bar cleared but 0 inside the interval: an early look goes on, the last accepts
    assert look_verdict(0.2, -0.02, 0.4, last=False, **kw) == CONTINUE
    assert look_verdict(0.2, -0.02, 0.4, last=True, **kw) == ACCEPT
    assert look_verdict(0.05, -0.02, 0.4, last=True, **kw) == INCONCLUSIVE
    got = look_verdict(np.array([0.0, 0.2]), np.array([-0.1, 0.02]), np.array([0.05, 0.4]),
                       last=False, **kw)
    assert got.tolist() == [REJECT, ACCEPT]


EXPERIMENT = """\
name: seq
tasks: [tasks]
seed: 11
arms:
  base: {agent: nop}
  cand: {agent: oracle}
bar:
  hoped_improvement: 0.2
  max_regression: 0.1
SEQ"""


def _exp(root: Path, seq: str, families: int = 0, tasks: int = 12) -> Path:
    for i in range(tasks):
        b = make_bundle(root / "tasks" / f"t{i:02d}", task_id=f"t{i:02d}")
        y = b / "task.yaml"  # the fixture's tasks are all of one family; give each its own
        y.write_text(y.read_text().replace("family: arith\n", f"family: f{i % families}\n"
                                           if families else ""))
    path = root / "experiment.yaml"
    path.write_text(EXPERIMENT.replace("SEQ", seq))
    return path


def test_the_sequential_block_is_validated_at_its_line(tmp_path: Path) -> None:
    path = _exp(tmp_path, "  sequential: {looks: [4, 20]}\n")
    with pytest.raises(SuiteError) as err:
        load_experiment(path)
    assert "bar.sequential.looks.1" in str(err.value) and "selects 12" in str(err.value)
    for bad, says in (("{looks: [4, 8], every: 4}", "exactly one"), ("{looks: [8, 4]}",
                      "increase"), ("{looks: [2, 8]}", "4 tasks or more"),
                      ("{every: 4, spending: sprinkle}", "spending")):
        path.write_text(EXPERIMENT.replace("SEQ", f"  sequential: {bad}\n"))
        with pytest.raises(SuiteError, match=says):
            load_experiment(path)


def test_the_plan_is_in_the_bar_hash_and_absent_leaves_it_as_before(tmp_path: Path) -> None:
    path = _exp(tmp_path, "")
    plain = load_experiment(path).identity["settings"]["bar"]
    assert "sequential" not in plain  # runs begun before it existed keep their bar_sha256
    path.write_text(EXPERIMENT.replace("SEQ", "  sequential: {every: 4}\n"))
    seq = load_experiment(path).identity["settings"]["bar"]
    path.write_text(EXPERIMENT.replace("SEQ", "  sequential: {every: 4, spending: "
                                       "obrien_fleming}\n"))
    other = load_experiment(path).identity["settings"]["bar"]
    assert len({bar_sha256(plain), bar_sha256(seq), bar_sha256(other)}) == 3
    assert seq["sequential"] == {"looks": None, "every": 4, "spending": "pocock"}


def test_the_task_order_is_seeded_stratified_and_cut_at_the_looks(tmp_path: Path) -> None:
    path = _exp(tmp_path, "  sequential: {looks: [4, 8]}\n", families=3)
    exp = load_experiment(path)
    order = task_order(exp)
    assert sorted(order) == sorted(exp.bundles) and order == task_order(load_experiment(path))
    # each look's tasks hold every family in its share: 4 tasks of 3 families of 4 each
    fam = {t: exp.bundles[t].spec.family for t in order}
    assert len(Counter(fam[t] for t in order[:4])) >= 2
    assert max(Counter(fam[t] for t in order[:6]).values()) <= 3
    trials = plan(exp)
    tasks_in_order = list(dict.fromkeys(k.task for k in trials))
    assert set(tasks_in_order[:4]) == set(order[:4]) and set(tasks_in_order[4:8]) == set(
        order[4:8])
    first_block = trials[:4 * 2]  # every trial of the first look's tasks comes first
    assert {k.task for k in first_block} == set(order[:4])
    assert len(trials) == 24 and len(set(trials)) == 24


def test_exp_plan_prints_the_sequential_bar_beside_the_fixed_design(tmp_path: Path) -> None:
    path = _exp(tmp_path, "  sequential: {every: 4}\n", tasks=12)
    res = run_cli(["exp", "plan", "--experiment", str(path), "--p-a", "0.5", "--json"])
    assert res.code == 0, res.stderr
    seq = json.loads(res.stdout)["sequential"]
    assert seq["looks"] == [4, 8, 12] and seq["spending"] == "pocock"
    rows = {r["delta_name"]: r for r in seq["rows"]}
    assert set(rows) == {"0", "hoped_improvement", "-max_regression"}
    for r in rows.values():  # probabilities, and a sequential run never runs more tasks
        for side in ("fixed", "sequential"):
            assert 0 <= r[side]["accept"] <= 1 and 0 <= r[side]["reject"] <= 1
        assert 4 <= r["sequential"]["expected_tasks"] <= 12 == r["fixed"]["tasks"]
    assert rows["hoped_improvement"]["sequential"]["accept"] > rows["0"]["sequential"]["accept"]
    assert rows["-max_regression"]["sequential"]["accept"] <= 0.01
    text = run_cli(["exp", "plan", "--experiment", str(path), "--p-a", "0.5"]).stdout
    assert "sequential bar: pocock spending, looks at 4, 8, 12 of 12 tasks" in text
    assert "hoped_improvement (+20.0 pts)" in text


def _seq_record(looks: list[dict], stopped: int | None, run_to_end: bool = False) -> dict:
    return {"schema": "assay.experiment.sequential/1", "spending": "pocock",
            "baseline": "base", "candidate": "cand", "hoped_improvement": 0.2,
            "max_regression": 0.1, "planned_tasks": 12, "looks_planned": [4, 8, 12],
            "levels": [0.98, 0.98, 0.97], "looks": looks, "stopped_at_look": stopped,
            "decision": None if stopped is None else looks[stopped]["decision"],
            "run_to_end": run_to_end}


def _look(i: int, tasks: int, decision: str, ci: list[float]) -> dict:
    return {"index": i, "tasks": tasks, "planned_tasks": 12, "level": 0.98, "last": tasks == 12,
            "trials_done": 2 * tasks, "delta": sum(ci) / 2, "ci": ci, "n_compared": tasks,
            "decision": decision, "reasons": []}


def _verdict(decision: str = "inconclusive", hard_fail: bool = False) -> dict:
    return {"decision": decision, "exit_code": 4, "tasks_to_settle": 30,
            "reasons": ["hard requirement cost failed: …"] if hard_fail else ["today's"],
            "checks": [{"name": "cost", "hard": True, "ok": False if hard_fail else True}]}


def test_the_verdict_of_a_run_with_looks(tmp_path: Path) -> None:
    """A look's decision is the verdict (a failed hard requirement the look could not read
    still rejects); the trials not run and their cost at the observed cost per trial are
    said; a run taken to the end is the fixed design's verdict, said so; an unfinished run's
    reading is called interim."""
    from assay.report.sequential import apply_looks, looks_plot, sequential_section

    arms = {"base": {"cost_usd": 0.8, "graded": 8, "cost_complete": True},
            "cand": {"cost_usd": 1.6, "graded": 8, "cost_complete": True}}
    looks = [_look(0, 4, "continue", [-0.3, 0.6]), _look(1, 8, "accept", [0.05, 0.7])]
    (tmp_path / "sequential.json").write_text(json.dumps(_seq_record(looks, 1)))
    seq = sequential_section(tmp_path, {"repetitions": 2}, arms)
    assert seq is not None and seq["trials_not_run"] == 16  # 4 tasks x 2 reps x 2 arms
    assert seq["cost_not_spent_usd"] == pytest.approx(8 * 0.1 + 8 * 0.2)
    v = apply_looks(_verdict(), seq)
    assert v["decision"] == "accept" and v["exit_code"] == 0 and v["tasks_to_settle"] is None
    assert v["reasons"][0].startswith("stopped at look 2 of 3 (8 of 12 tasks)")
    assert "16 planned trials (4 tasks) not run, about $2.4000" in v["reasons"][-1]
    assert apply_looks(_verdict(hard_fail=True), seq)["decision"] == "reject"
    plot = looks_plot(seq)
    assert plot is not None and [r["x_lo"] < r["x_hi"] for r in plot["rows"]] == [True, True]
    # the interval narrows look by look, as drawn
    widths = [r["x_hi"] - r["x_lo"] for r in plot["rows"]]
    assert widths[1] < widths[0]
    assert sorted(m["label"].split(" ")[0] for m in plot["lines"]) == [
        "0", "hoped", "−max_regression"]

    (tmp_path / "sequential.json").write_text(json.dumps(_seq_record(looks, 1, True)))
    seq = sequential_section(tmp_path, {"repetitions": 2}, arms)
    assert seq["trials_not_run"] == 0
    v = apply_looks(_verdict("accept"), seq)
    assert v["reasons"][0].startswith("analysed as the fixed design")

    (tmp_path / "sequential.json").write_text(json.dumps(_seq_record(looks[:1], None)))
    v = apply_looks(_verdict(), sequential_section(tmp_path, {"repetitions": 2}, arms))
    assert "interim reading" in v["reasons"][0] and v["decision"] == "inconclusive"
    # a damaged record is named, file and field
    bad = _seq_record(looks, 1)
    del bad["looks_planned"]
    (tmp_path / "sequential.json").write_text(json.dumps(bad))
    with pytest.raises(Exception, match="sequential.json: field 'looks_planned'"):
        sequential_section(tmp_path, {"repetitions": 2}, arms)
