"""Bad suites are refused before any model call, with file:line:field, exit 2, and no run dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.suites.cases import load_suite
from assay.suites.errors import SuiteError

PROMPT = 'Classify. Reply {"label": "bug|feature"}.'


def make_suite(root: Path, lines: list[str] | bytes, *, prompt: str | None = PROMPT,
               yaml_text: str | None = None) -> Path:
    (root / "data").mkdir(parents=True, exist_ok=True)
    data = lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode()
    (root / "data" / "cases.jsonl").write_bytes(data)
    if prompt is not None:
        (root / "prompts").mkdir(exist_ok=True)
        (root / "prompts" / "system.txt").write_text(prompt)
    if yaml_text is not None:
        (root / "suite.yaml").write_text(yaml_text)
    return root


def case(i: str, expected: str = "bug", text: str = "Title: x\nBody: y") -> str:
    return json.dumps({"id": i, "input": text, "expected": expected})


def problems(root: Path) -> list[str]:
    with pytest.raises(SuiteError) as info:
        load_suite(root)
    return [str(p) for p in info.value.problems]


def test_good_suite_labels_from_cases(tmp_path: Path) -> None:
    suite = load_suite(make_suite(tmp_path, [case("a"), case("b", "Feature")]))
    assert suite.labels == ("bug", "feature")
    assert suite.labels_source == "cases"
    assert [c.expected for c in suite.cases] == ["bug", "feature"]
    assert len(suite.cases_sha256) == 64


def test_labels_from_yaml(tmp_path: Path) -> None:
    suite = load_suite(make_suite(tmp_path, [case("a")], yaml_text="labels: [bug, feature]\n"))
    assert suite.labels == ("bug", "feature") and suite.labels_source == "suite.yaml"


def test_invalid_json_line(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a"), '{"id": "b", "input": ']))
    assert p.endswith("cases.jsonl:2: invalid JSON: Expecting value (column 22)")


@pytest.mark.parametrize("obj, field, msg", [
    ({"input": "x", "expected": "bug"}, "id", "missing"),
    ({"id": 7, "input": "x", "expected": "bug"}, "id", "must be a string, got int"),
    ({"id": "a", "expected": "bug"}, "input", "missing"),
    ({"id": "a", "input": ["x"], "expected": "bug"}, "input", "must be a string, got list"),
    ({"id": "a", "input": "x"}, "expected", "missing"),
    ({"id": "a", "input": "x", "expected": None}, "expected", "must be a string, got NoneType"),
])
def test_missing_or_wrong_fields(tmp_path: Path, obj: dict, field: str, msg: str) -> None:
    [p] = problems(make_suite(tmp_path, [case("z"), json.dumps(obj)]))
    assert f"cases.jsonl:2: field '{field}': {msg}" in p


def test_duplicate_ids_name_both_lines(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a"), case("b"), case("a")]))
    assert "cases.jsonl:3: field 'id': duplicate id 'a' (first on line 1)" in p


def test_expected_not_in_labels(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a"), case("b", "question")],
                              yaml_text="labels: [bug, feature]\n"))
    assert "cases.jsonl:2: field 'expected': 'question' is not one of the labels" in p


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    ps = problems(make_suite(tmp_path, ["nope", case("a"), case("a"), '{"id": 1}']))
    assert len(ps) >= 4


def test_empty_file(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, b""))
    assert "file is empty" in p


def test_not_utf8(tmp_path: Path) -> None:
    data = (case("a") + "\n").encode() + b'{"id": "b", "input": "caf\xe9", "expected": "bug"}\n'
    [p] = problems(make_suite(tmp_path, data))
    assert "cases.jsonl:2: not valid UTF-8" in p


def test_missing_prompt(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a")], prompt=None))
    assert "prompts/system.txt: system prompt file not found" in p


def test_yaml_unknown_key_names_line(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a")],
                              yaml_text="labels: [bug]\ntemprature: 0.5\n"))
    assert ("suite.yaml:2: field 'temprature': unknown key 'temprature': did you mean "
            "'temperature'?") in p


def test_yaml_bad_value(tmp_path: Path) -> None:
    [p] = problems(make_suite(tmp_path, [case("a")], yaml_text="repeats: 0\n"))
    assert "suite.yaml:1: field 'repeats'" in p


def test_cli_bad_input_exits_2_without_run_dir(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "s", [case("a"), case("a")])
    out = tmp_path / "run"
    env = {**os.environ, "MODEL_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "m"}
    proc = subprocess.run([sys.executable, "-m", "assay", "run", str(suite), "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "duplicate id 'a'" in proc.stderr
    assert not out.exists()
    assert not (tmp_path / "runs").exists()


def test_cli_baseline_without_train_refuses(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "s", [case("a")])
    proc = subprocess.run([sys.executable, "-m", "assay", "run", str(suite), "--model",
                           "builtin/baseline", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "data/train.jsonl" in proc.stderr
    assert not (tmp_path / "run").exists()
