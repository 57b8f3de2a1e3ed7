"""A misspelt key in a file a person wrote is answered with the key they meant (or the keys that
are allowed there), at its line, through the real CLI: task.yaml, experiment.yaml (also inside an
arm, a mapping of user-chosen names), suite.yaml and judge.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run_cli, write_suite

REPO = Path(__file__).resolve().parents[1]
TASK = REPO / "examples" / "agent-tasks" / "duration-parse-001"


def flat(text: str) -> str:
    """The message with the terminal's line wrapping undone."""
    return " ".join(text.split())


def test_task_yaml_typo_names_the_key_meant(tmp_path: Path) -> None:
    bundle = tmp_path / "t"
    shutil.copytree(TASK, bundle)
    text = (bundle / "task.yaml").read_text()
    (bundle / "task.yaml").write_text(text.replace("verifier_wall_seconds", "verifer_wall_seconds"))
    res = run_cli(["task", "lint", str(bundle)])
    assert res.code == 2
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "verifier_wall" in s)
    assert (f"task.yaml:{line}: field 'budget.verifer_wall_seconds': unknown key "
            "'verifer_wall_seconds': did you mean 'verifier_wall_seconds'?") in flat(res.stderr)


def test_experiment_typos_inside_arms_and_bar(tmp_path: Path) -> None:
    shutil.copytree(TASK, tmp_path / "tasks" / "t")
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: e\ntasks: [tasks]\narms:\n  base:\n    agnet: oracle\n"
                   "  cand:\n    agent: nop\nbar:\n  hoped_improvment: 0.1\n"
                   "  max_regression: 0.05\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 2
    assert ("exp.yaml:5: field 'arms.base.agnet': unknown key 'agnet': did you mean "
            "'agent'?") in flat(res.stderr)
    assert ("exp.yaml:9: field 'bar.hoped_improvment': unknown key 'hoped_improvment': "
            "did you mean 'hoped_improvement'?") in flat(res.stderr)
    assert "field 'arms.base.agent': required key missing" in flat(res.stderr)
    assert not (tmp_path / "run").exists()


def test_suite_yaml_typo_and_a_key_like_no_other(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s", [("a", "x", "bug")],
                        extra_yaml="temprature: 0.3\ncolour: blue")
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out",
                   str(tmp_path / "run")])
    assert res.code == 2
    assert "field 'temprature': unknown key 'temprature': did you mean 'temperature'?" \
        in flat(res.stderr)
    assert "unknown key 'colour' (allowed here: description, labels, max_tokens, " \
        "output_field, repeats, scorer, splits, temperature, tiers)" in flat(res.stderr)


def test_judge_yaml_typo(tmp_path: Path) -> None:
    (tmp_path / "rubric.yaml").write_text(
        "- {id: helpful, question: Is it helpful?, scale: [0, 1, 2]}\n")
    (tmp_path / "judge.yaml").write_text("model: m\nrubric: rubric.yaml\ntemperture: 0\n")
    res = run_cli(["judge", "check", str(tmp_path / "judge.yaml")])
    assert res.code == 2
    assert "unknown key 'temperture': did you mean 'temperature'?" in flat(res.stderr)
