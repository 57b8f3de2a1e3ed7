"""The experiment file: validated before anything runs, errors at file:line:field, bundles found
and selected, an identity that changes with every input that matters, and a seeded plan that
interleaves the arms."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.errors import SuiteError
from assay.suites.experiment import (
    Experiment,
    TrialKey,
    identity_sha256,
    load_experiment,
    plan,
)

GOOD = """\
# experiment for assay's tests
name: constraint-checkpoint
tasks: [tasks]
select: {split: dev}
repetitions: 3
seed: 7
concurrency: 2
arms:
  baseline:
    agent: "command:python3 agents/my_agent.py --checkpoint v1"
    model: {name: qwen2.5-coder-7b, base_url_env: MODEL_BASE_URL, api_key_env: MODEL_API_KEY}
    params: {temperature: 0.2}
  candidate:
    agent: "command:python3 agents/my_agent.py --checkpoint v2"
    model: {name: qwen2.5-coder-7b, base_url_env: MODEL_BASE_URL, api_key_env: MODEL_API_KEY}
    params: {temperature: 0.2}
limits:
  tokens: 400000
  cost_usd: 1.50
  total_cost_usd: 40
prices:
  qwen2.5-coder-7b: {input: 0.30, cached_input: 0.03, output: 1.20}
retries: {infra: 2}
bar:
  primary: pass_rate
  hoped_improvement: 0.05
  max_regression: 0.02
  max_cost_increase: 0.20
  integrity_violations: 0
  max_new_failures: 2
weights: {calc-a: 2}
"""


@pytest.fixture
def exp_dir(tmp_path: Path) -> Path:
    for tid, split in (("calc-a", "dev"), ("calc-b", "dev"), ("calc-h", "holdout")):
        make_bundle(tmp_path / "tasks" / tid, task_id=tid, split=split)
    (tmp_path / "experiment.yaml").write_text(GOOD)
    return tmp_path


def write(exp_dir: Path, text: str) -> Path:
    p = exp_dir / "experiment.yaml"
    p.write_text(text)
    return p


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_good_file_loads_selects_and_keeps_bar_and_weights(exp_dir: Path) -> None:
    exp = load_experiment(exp_dir / "experiment.yaml")
    assert list(exp.bundles) == ["calc-a", "calc-b"]  # holdout left out by select.split
    assert exp.spec.arms["baseline"].model is not None
    assert exp.spec.arms["baseline"].model.protocol == "chat"  # the default
    assert exp.spec.bar is not None and exp.spec.bar.max_new_failures == 2
    assert exp.spec.weights == {"calc-a": 2}
    assert exp.spec.retries.infra == 2
    ident = exp.identity
    assert set(ident["tasks"]) == {"calc-a", "calc-b"}
    fp = ident["tasks"]["calc-a"]
    assert fp["fixture_digest"].startswith("sha256:") and fp["tests_digest"].startswith("sha256:")
    assert len(fp["task_yaml_sha256"]) == 64
    assert ident["arms"]["candidate"] == {
        "agent": "command:python3 agents/my_agent.py --checkpoint v2",
        "model": {"name": "qwen2.5-coder-7b", "protocol": "chat"},
        "params": {"temperature": 0.2}}
    assert len(exp.identity_sha256) == 64


def test_task_paths_are_relative_to_the_file_not_the_cwd(exp_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path_factory: pytest.TempPathFactory
                                                         ) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    exp = load_experiment(exp_dir / "experiment.yaml")
    assert exp.bundles["calc-a"].root.resolve() == (exp_dir / "tasks" / "calc-a").resolve()


@pytest.mark.parametrize("old, new, field, needle", [
    ("repetitions: 3", "repetitions: 0", "repetitions", "repetitions:"),
    ("concurrency: 2", "concurency: 2", "concurency", "concurency:"),
    ("    params: {temperature: 0.2}\n  candidate:", "    prams: {}\n  candidate:",
     "arms.baseline.prams", "prams:"),
    ("protocol", "protocol", None, None),  # placeholder replaced below
    ("select: {split: dev}", "select: {split: prod}", "select.split", "select:"),
    ("  cost_usd: 1.50", "  cost_usd: -1", "limits.cost_usd", "  cost_usd:"),
    ("{input: 0.30, cached_input: 0.03, output: 1.20}", "{input: 0.30}",
     "prices.qwen2.5-coder-7b.output", "qwen2.5-coder-7b: {input"),
    ("retries: {infra: 2}", "retries: {infra: -1}", "retries.infra", "retries:"),
    ("  max_regression: 0.02", "  max_regresion: 0.02", "bar.max_regresion", "max_regresion"),
    ("name: constraint-checkpoint", "name: has space", "name", "name: has space"),
])
def test_schema_errors_name_file_line_and_field(exp_dir: Path, old: str, new: str,
                                                field: str | None, needle: str | None) -> None:
    if field is None:  # an unknown protocol, on its own line
        old = "    model: {name: qwen2.5-coder-7b, base_url_env: MODEL_BASE_URL, "
        new = "    model:\n      protocol: grpc\n      name: m\n    x_unused: "
        field, needle = "arms.baseline.model.protocol", "protocol: grpc"
        text = GOOD.replace(old, new, 1).replace("    x_unused: api_key_env: MODEL_API_KEY}\n",
                                                 "", 1)
    else:
        assert old in GOOD
        text = GOOD.replace(old, new, 1)
    path = write(exp_dir, text)
    with pytest.raises(SuiteError) as info:
        load_experiment(path)
    [p] = [p for p in info.value.problems if p.field == field]
    assert p.path == path and p.line == line_of(text, needle), info.value
    assert f"experiment.yaml:{p.line}: field '{field}'" in str(info.value)


def test_block_list_entry_errors_point_at_the_entry(exp_dir: Path) -> None:
    text = GOOD.replace("tasks: [tasks]", "tasks:\n  - tasks\n  - missing-folder")
    path = write(exp_dir, text)
    with pytest.raises(SuiteError) as info:
        load_experiment(path)
    [p] = info.value.problems
    assert (p.field, p.line) == ("tasks.1", line_of(text, "- missing-folder"))
    assert "missing-folder" in p.message


def test_invalid_yaml_and_non_mapping(exp_dir: Path) -> None:
    path = write(exp_dir, "name: x\ntasks: [unclosed\n")
    with pytest.raises(SuiteError) as info:
        load_experiment(path)
    assert "invalid YAML" in str(info.value) and info.value.problems[0].line is not None
    path = write(exp_dir, "- just\n- a list\n")
    with pytest.raises(SuiteError, match="mapping at the top level"):
        load_experiment(path)
    with pytest.raises(SuiteError, match="not found"):
        load_experiment(exp_dir / "nope.yaml")


def test_bad_bundle_problems_are_reported_with_the_experiments_own(exp_dir: Path) -> None:
    task_yaml = exp_dir / "tasks" / "calc-b" / "task.yaml"
    task_yaml.write_text(task_yaml.read_text().replace("split: dev", "split: prod"))
    path = write(exp_dir, GOOD.replace("repetitions: 3", "repetitions: 0"))
    with pytest.raises(SuiteError) as info:
        load_experiment(path)
    # the file's own schema comes first (its task paths may be what is wrong) ...
    assert [(p.path, p.field) for p in info.value.problems] == [(path, "repetitions")]
    # ... and once it holds, the bundle's problems are reported with their own file and line
    path = write(exp_dir, GOOD)
    with pytest.raises(SuiteError) as info:
        load_experiment(path)
    assert [(p.path, p.field) for p in info.value.problems] == [(task_yaml, "split")]


def test_duplicate_tasks_empty_selection_unknown_ids_and_weights(exp_dir: Path) -> None:
    text = GOOD.replace("tasks: [tasks]", "tasks: [tasks, tasks/calc-a]")
    with pytest.raises(SuiteError, match="'calc-a' found twice") as info:
        load_experiment(write(exp_dir, text))
    assert info.value.problems[0].field == "tasks.1"
    text = GOOD.replace("select: {split: dev}", "select: {split: validation}")
    with pytest.raises(SuiteError, match="selects none of the 3 tasks") as info:
        load_experiment(write(exp_dir, text))
    assert info.value.problems[0].line == line_of(text, "select:")
    text = GOOD.replace("select: {split: dev}", "select: {ids: [calc-a, calc-zz]}")
    with pytest.raises(SuiteError, match="no task 'calc-zz'") as info:
        load_experiment(write(exp_dir, text))
    assert info.value.problems[0].field == "select.ids.1"
    text = GOOD.replace("weights: {calc-a: 2}", "weights: {calc-q: 2, calc-b: 0}")
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    assert {p.field for p in info.value.problems} == {"weights.calc-q", "weights.calc-b"}
    (exp_dir / "empty").mkdir()
    with pytest.raises(SuiteError, match="no task bundle"):
        load_experiment(write(exp_dir, GOOD.replace("tasks: [tasks]", "tasks: [empty]")))


def test_select_by_family_and_ids(exp_dir: Path) -> None:
    text = GOOD.replace("select: {split: dev}",
                        "select: {split: holdout, families: [arith], ids: [calc-h]}")
    assert list(load_experiment(write(exp_dir, text)).bundles) == ["calc-h"]
    text = GOOD.replace("select: {split: dev}", "select: {families: [strings]}")
    with pytest.raises(SuiteError, match="selects none"):
        load_experiment(write(exp_dir, text))


def test_without_a_split_only_dev_tasks_run(exp_dir: Path) -> None:
    """Leaving out ``select`` never blends dev and holdout into one Δ, nor spends a holdout
    look by accident: tasks spanning splits are refused with the splits named and how to
    choose; a holdout task picked by id needs its split named too."""
    text = GOOD.replace("select: {split: dev}\n", "")
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    [p] = info.value.problems
    assert p.field == "tasks" and p.line == line_of(text, "tasks:")
    assert "span several splits: dev (2: calc-a, calc-b), holdout (1: calc-h)" in p.message
    assert "select: {split: dev}" in p.message
    text = GOOD.replace("select: {split: dev}", "select: {ids: [calc-h]}")
    with pytest.raises(SuiteError, match=r"every task is in the holdout split .* only on "
                                         r"purpose. Write select: \{split: holdout\}"):
        load_experiment(write(exp_dir, text))
    text = GOOD.replace("select: {split: dev}", "select: {ids: [calc-a, calc-b]}")
    assert list(load_experiment(write(exp_dir, text)).bundles) == ["calc-a", "calc-b"]
    res = run_cli(["exp", "run", str(write(exp_dir, GOOD.replace("select: {split: dev}\n", ""))),
                   "--out", str(exp_dir / "run")])
    assert res.code == 2 and "span several splits" in " ".join(res.stderr.split())
    assert not (exp_dir / "run").exists()


def test_unpriced_model_refused_only_when_a_cost_limit_is_set(exp_dir: Path) -> None:
    text = GOOD.replace("    model: {name: qwen2.5-coder-7b, base_url_env: MODEL_BASE_URL, "
                        "api_key_env: MODEL_API_KEY}\n    params: {temperature: 0.2}\n  candidate",
                        "    model: {name: mystery-model}\n    params: {}\n  candidate", 1)
    assert "mystery-model" in text
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    [p] = info.value.problems
    assert p.field == "arms.baseline.model.name" and "mystery-model" in p.message
    assert p.line == line_of(text, "mystery-model")
    no_cost = text.replace("  cost_usd: 1.50\n", "").replace("  total_cost_usd: 40\n", "")
    exp = load_experiment(write(exp_dir, no_cost))
    assert exp.identity["arms"]["baseline"]["model"]["name"] == "mystery-model"
    # an arm without a model (a reference agent) needs no price
    no_model = GOOD.replace("    model: {name: qwen2.5-coder-7b, base_url_env: MODEL_BASE_URL, "
                            "api_key_env: MODEL_API_KEY}\n    params: {temperature: 0.2}\n"
                            "  candidate", "    params: {}\n  candidate", 1)
    assert load_experiment(write(exp_dir, no_model)).identity["arms"]["baseline"]["model"] is None


def test_arm_names_must_be_folder_names(exp_dir: Path) -> None:
    text = GOOD.replace("  candidate:", "  ../escape:")
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    [p] = info.value.problems
    assert p.field == "arms.../escape" and p.line == line_of(text, "../escape:")


def _identity(exp_dir: Path) -> dict:
    return load_experiment(exp_dir / "experiment.yaml").identity


def test_identity_changes_with_file_task_tests_tree_and_arm(exp_dir: Path) -> None:
    base = _identity(exp_dir)
    assert _identity(exp_dir) == base
    # a comment: only the file's bytes change
    write(exp_dir, GOOD + "# a note\n")
    changed = _identity(exp_dir)
    assert changed["file_sha256"] != base["file_sha256"]
    assert changed["tasks"] == base["tasks"] and changed["arms"] == base["arms"]
    write(exp_dir, GOOD)
    (exp_dir / "tasks/calc-a/tests/test_fix.py").write_text("def test_other():\n    pass\n")
    ident = _identity(exp_dir)
    assert ident["tasks"]["calc-a"]["tests_digest"] != base["tasks"]["calc-a"]["tests_digest"]
    assert ident["tasks"]["calc-b"] == base["tasks"]["calc-b"]
    write(exp_dir, GOOD.replace("--checkpoint v2", "--checkpoint v3"))
    ident = _identity(exp_dir)
    assert ident["arms"]["candidate"]["agent"].endswith("v3")
    assert ident["arms"]["baseline"] == base["arms"]["baseline"]
    assert identity_sha256(ident) != identity_sha256(base)


def test_unpinned_starting_tree_is_digested(tmp_path: Path) -> None:
    make_bundle(tmp_path / "tasks" / "calc-a", task_id="calc-a", pin_digest=False)
    write(tmp_path, GOOD.replace("weights: {calc-a: 2}\n", ""))
    fp = _identity(tmp_path)["tasks"]["calc-a"]
    src = tmp_path / "tasks/calc-a/repo/src/calc/__init__.py"
    src.write_text(src.read_text() + "# changed\n")
    assert _identity(tmp_path)["tasks"]["calc-a"]["fixture_digest"] != fp["fixture_digest"]


def _plan(exp_dir: Path, seed: int, reps: int = 3) -> tuple[Experiment, list[TrialKey]]:
    write(exp_dir, GOOD.replace("seed: 7", f"seed: {seed}").replace("weights: {calc-a: 2}\n", "")
          .replace("repetitions: 3", f"repetitions: {reps}")
          .replace("  candidate:", "  third:\n    agent: nop\n  candidate:")
          .replace("  max_new_failures: 2\n", "  max_new_failures: 2\n  baseline: baseline\n"
                   "  candidate: candidate\n"))
    exp = load_experiment(exp_dir / "experiment.yaml")
    return exp, plan(exp)


def test_plan_is_complete_seeded_and_interleaves_arms(exp_dir: Path) -> None:
    shutil.rmtree(exp_dir / "tasks")
    for i in range(12):
        make_bundle(exp_dir / "tasks" / f"t{i:02d}", task_id=f"t{i:02d}")
    exp, order = _plan(exp_dir, seed=7, reps=4)
    arms = sorted(exp.spec.arms)
    expected = {TrialKey(t, a, r) for t in exp.bundles for a in arms for r in range(4)}
    assert len(order) == len(set(order)) == len(expected) and set(order) == expected
    assert _plan(exp_dir, seed=7, reps=4)[1] == order  # deterministic for a seed
    other = _plan(exp_dir, seed=8, reps=4)[1]
    assert other != order and set(other) == expected
    # interleaved: every consecutive group of len(arms) trials is one (task, rep) with every arm
    for i in range(0, len(order), len(arms)):
        block = order[i:i + len(arms)]
        assert len({(k.task, k.rep) for k in block}) == 1
        assert sorted(k.arm for k in block) == arms
    # not task-major: the first block is not simply the first task's first repetition, and no
    # arm always goes first
    assert [k.task for k in order[::len(arms)]] != sorted(k.task for k in order[::len(arms)])
    firsts = Counter(order[i].arm for i in range(0, len(order), len(arms)))
    assert len(firsts) == len(arms) and max(firsts.values()) < len(order) // len(arms)


@pytest.mark.parametrize(("extra", "field", "needle"), [
    ("  baseline: nosuch\n  candidate: candidate\n", "bar.baseline", "no arm 'nosuch'"),
    ("  baseline: baseline\n", "bar", "name both baseline and candidate"),
    ("  baseline: baseline\n  candidate: baseline\n", "bar.candidate", "is the baseline"),
])
def test_bar_must_say_which_arm_is_which(exp_dir: Path, extra: str, field: str,
                                         needle: str) -> None:
    text = GOOD.replace("  max_new_failures: 2\n", "  max_new_failures: 2\n" + extra)
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    p = next(p for p in info.value.problems if p.field == field)
    assert needle in p.message and p.line is not None


def test_bar_with_three_unnamed_arms_is_refused(exp_dir: Path) -> None:
    text = GOOD.replace("  candidate:", "  third:\n    agent: nop\n  candidate:")
    with pytest.raises(SuiteError) as info:
        load_experiment(write(exp_dir, text))
    assert any(p.field == "bar" and "3 arms" in p.message for p in info.value.problems)
