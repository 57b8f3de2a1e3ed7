"""Every narrow scorer on hand-made answers, and the suite checks that refuse a scorer or an
expected value before any call (file:line:field). End-to-end runs: test_scorers_run.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from assay.grading.answers.scorer_rules import read_number
from assay.grading.answers.scorers import Reading, Score, describe, scorer_for
from assay.suites.cases import NarrowSuite, load_suite
from assay.suites.errors import SuiteError
from assay.suites.scorer_config import fold_text

PROMPT = "Answer."


def make(root: Path, yaml_text: str, expected: list[Any], *, raw_lines: list[str] | None = None
         ) -> Path:
    """A suite whose case i expects ``expected[i]`` (any JSON value), scored as ``yaml_text``
    says."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(exist_ok=True)
    lines = raw_lines if raw_lines is not None else [
        json.dumps({"id": f"c{i}", "input": f"case {i}", "expected": e}, ensure_ascii=False)
        for i, e in enumerate(expected)]
    (root / "data" / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "prompts" / "system.txt").write_text(PROMPT)
    (root / "suite.yaml").write_text(yaml_text, encoding="utf-8")
    return root


def problems(root: Path) -> list[str]:
    with pytest.raises(SuiteError) as info:
        load_suite(root)
    return [str(p) for p in info.value.problems]


def judge(suite: NarrowSuite, reply: str | None, case: int = 0, refusal: str | None = None
          ) -> tuple[Reading, Score | None]:
    """Read one reply as the runner does, and score it when it is readable."""
    scorer = scorer_for(suite)
    reading = scorer.read(reply, refusal)
    if not reading.valid:
        return reading, None
    return reading, asyncio.run(scorer.score(reading.value, suite.cases[case]))


# --------------------------------------------------------------------------- text folding


@pytest.mark.parametrize("a, b", [
    ("ﬁne", "fine"),  # the ligature is NFKC-compatible with "fi"
    ("１２３", "123"),  # full-width digits
    ("Straße", "STRASSE"),  # case-folding, not lower-casing: ß folds to ss
    ("Hello,   World!", "hello world"),  # punctuation removed, whitespace runs made one
    ("  tabs\tand\nnewlines ", "tabs and newlines"),
    ("non\u00a0breaking", "non breaking"),  # NBSP is NFKC-compatible with a space
    ("e-mail", "email"),  # punctuation is removed, not made a space
    ("«Quoted»", "quoted"),
    ("Ｃａｆé", "café"),
])
def test_fold_makes_these_equal(a: str, b: str) -> None:
    assert fold_text(a) == fold_text(b)


@pytest.mark.parametrize("a, b", [
    ("hello world", "helloworld"),  # whitespace between words is kept (as one space)
    ("café", "cafe"),  # accents are letters, not folded away
    ("C++", "C"),  # symbols (category S) are not punctuation
    ("1/2", "½"),  # NFKC makes ½ "1⁄2" with a fraction slash (Sm), not "1/2"
])
def test_fold_keeps_these_apart(a: str, b: str) -> None:
    assert fold_text(a) != fold_text(b)


# --------------------------------------------------------------------------- normalized_text


def test_normalized_text_from_json(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "scorer: normalized_text\noutput_field: answer\n",
                            ["STRASSE", "ﬁnal 12"]))
    reading, score = judge(suite, '{"answer": "Straße"}')
    assert reading.value == "Straße" and score is not None and score.correct
    assert score.detail == {"answer": "strasse", "expected": "strasse"}
    _, score = judge(suite, '{"answer": "Final １２."}', case=1)
    assert score is not None and score.correct
    _, score = judge(suite, '{"answer": "Strasse 2"}')
    assert score is not None and not score.correct
    assert score.detail == {"answer": "strasse 2", "expected": "strasse"}
    # the JSON contract holds: prose, a number at the field, no field are invalid
    assert judge(suite, "Straße")[0].reason == "no_object"
    assert judge(suite, '{"answer": 12}')[0].reason == "missing_field"
    assert judge(suite, '{"text": "Straße"}')[0].reason == "missing_field"


def test_normalized_text_reading_text_is_never_invalid_for_not_being_json(tmp_path: Path
                                                                          ) -> None:
    suite = load_suite(make(tmp_path, "scorer: {type: normalized_text, reads: text}\n",
                            ["The final answer"]))
    reading, score = judge(suite, "<think>maybe JSON?</think>\n  the ﬁnal answer. ")
    assert reading.value == "the ﬁnal answer." and score is not None and score.correct
    reading, score = judge(suite, '{"answer": "The final answer"}')
    assert reading.valid and score is not None and not score.correct  # read as text: braces
    assert judge(suite, "")[0].reason == "empty"
    assert judge(suite, "<think>only thoughts</think>")[0].reason == "empty"
    assert judge(suite, None, refusal="no")[0].reason == "refusal"


# --------------------------------------------------------------------------- numeric


NUMERIC = "scorer: {type: numeric, abs_tol: 0.01}\noutput_field: value\n"


@pytest.mark.parametrize("reply, right", [
    ('{"value": 1.01}', True),  # exactly at abs_tol: inside (decimal, not float arithmetic)
    ('{"value": 0.99}', True),
    ('{"value": 1.0101}', False),
    ('{"value": 1}', True),
    ('{"value": "1.005"}', True),  # a plain number written as a string is read
    ('{"value": "1e0"}', True),
])
def test_numeric_abs_tolerance_edges(tmp_path: Path, reply: str, right: bool) -> None:
    suite = load_suite(make(tmp_path, NUMERIC, [1.0]))
    reading, score = judge(suite, reply)
    assert reading.valid and score is not None and score.correct is right
    assert score.detail is not None and score.detail["tolerance"] == 0.01


def test_numeric_relative_tolerance_is_relative_to_the_expected_value(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "scorer: {type: numeric, rel_tol: 0.01}\n"
                            "output_field: value\n", [200, 0]))
    assert judge(suite, '{"value": 202}')[1].correct  # type: ignore[union-attr]
    assert not judge(suite, '{"value": 202.01}')[1].correct  # type: ignore[union-attr]
    assert judge(suite, '{"value": 198}')[1].correct  # type: ignore[union-attr]
    # a wild answer does not widen its own tolerance (1% of 10000 would hold 200 ± 100)
    assert not judge(suite, '{"value": 10000}')[1].correct  # type: ignore[union-attr]
    # expected 0: a relative tolerance holds only 0 itself; rel_diff is unknown, not 0
    _, score = judge(suite, '{"value": 0.0}', case=1)
    assert score is not None and score.correct and score.detail["rel_diff"] is None
    assert not judge(suite, '{"value": 1e-12}', case=1)[1].correct  # type: ignore[union-attr]


def test_numeric_both_tolerances_take_the_wider(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "scorer: {type: numeric, abs_tol: 0.5, rel_tol: 0.1}\n"
                            "output_field: value\n", [100, 1]))
    assert judge(suite, '{"value": 110}')[1].correct  # type: ignore[union-attr]
    assert not judge(suite, '{"value": 110.5}')[1].correct  # type: ignore[union-attr]
    assert judge(suite, '{"value": 1.5}', case=1)[1].correct  # type: ignore[union-attr]


def test_numeric_without_tolerance_is_exact(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "scorer: numeric\noutput_field: value\n", [0.3, 1000]))
    assert judge(suite, '{"value": 0.3}')[1].correct  # type: ignore[union-attr]
    assert not judge(suite, '{"value": 0.30000000000000004}')[1].correct  # type: ignore
    _, score = judge(suite, '{"value": "1e3"}', case=1)
    assert score is not None and score.correct and score.detail["answer"] == 1000


@pytest.mark.parametrize("reply, reason", [
    ('{"value": "1,000"}', "not_a_number"),  # thousands separator or decimal comma: refused
    ('{"value": "NaN"}', "not_a_number"),
    ('{"value": "inf"}', "not_a_number"),
    ('{"value": "-Infinity"}', "not_a_number"),
    ('{"value": 1e400}', "not_a_number"),  # JSON allows it; it is a float overflow (inf)
    ('{"value": true}', "not_a_number"),
    ('{"value": "12 EUR"}', "not_a_number"),
    ('{"value": null}', "not_a_number"),
    ('{"value": NaN}', "not_json"),  # not JSON at all: the strict parser refuses the constant
    ('{"other": 1}', "missing_field"),
    ("1000", "no_object"),
])
def test_numeric_refuses_what_is_not_a_plain_number(tmp_path: Path, reply: str,
                                                    reason: str) -> None:
    suite = load_suite(make(tmp_path, NUMERIC, [1000]))
    reading, _ = judge(suite, reply)
    assert reading.reason == reason


def test_numeric_comma_is_explained() -> None:
    number, why = read_number("1,000")
    assert number is None and why is not None and "locale" in why
    assert read_number(" 42 ")[0] == 42 and read_number(".25")[0] is not None
    assert read_number("+3.")[0] is not None and read_number("1e-3")[0] is not None


def test_numeric_reading_text(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "scorer: {type: numeric, reads: text, abs_tol: 0}\n",
                            [3.5]))
    assert judge(suite, "  3.5\n")[1].correct  # type: ignore[union-attr]
    assert judge(suite, "<think>7/2</think>3.50")[1].correct  # type: ignore[union-attr]
    assert judge(suite, "The answer is 3.5")[0].reason == "not_a_number"
    assert judge(suite, "")[0].reason == "empty"


# --------------------------------------------------------------------------- json_fields


FIELDS = """scorer:
  type: json_fields
  fields:
    name: normalized_text
    id: exact
    total: {rule: numeric, abs_tol: 0.01}
    customer:
      rule: json_fields
      fields:
        country: exact
        vip: exact
"""
INVOICE = {"name": "ACME GmbH", "id": "RE-1", "total": 12.5,
           "customer": {"country": "DE", "vip": True}}


def answer(**changes: Any) -> str:
    obj: dict[str, Any] = json.loads(json.dumps(INVOICE))
    for key, value in changes.items():
        if value is ...:
            obj.pop(key)
        else:
            obj[key] = value
    return json.dumps(obj)


def verdicts(score: Score | None) -> dict[str, bool]:
    assert score is not None and score.detail is not None
    return {path: f["correct"] for path, f in score.detail["fields"].items()}


def test_json_fields_all_right_and_extra_fields_ignored(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    _, score = judge(suite, answer(name="acme gmbh.", total="12.505", notes="extra"))
    assert score is not None and score.correct
    assert verdicts(score) == {"name": True, "id": True, "total": True, "customer": True,
                               "customer.country": True, "customer.vip": True}


def test_json_fields_missing_field_is_wrong_not_invalid(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    reading, score = judge(suite, answer(total=...))
    assert reading.valid and score is not None and not score.correct
    assert verdicts(score)["total"] is False and verdicts(score)["name"] is True
    assert score.detail["fields"]["total"]["why"] == "missing"  # type: ignore[index]


def test_json_fields_nested_rule(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    _, score = judge(suite, answer(customer={"country": "AT", "vip": True}))
    assert verdicts(score) == {"name": True, "id": True, "total": True, "customer": False,
                               "customer.country": False, "customer.vip": True}
    _, score = judge(suite, answer(customer="DE"))
    got = verdicts(score)
    assert got["customer"] is False and got["customer.country"] is False
    assert score.detail["fields"]["customer"]["why"].startswith("not an object")  # type: ignore


def test_json_fields_exact_is_json_equality(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    # true is not 1, "RE-1" is not "re-1" (exact does not fold)
    assert verdicts(judge(suite, answer(customer={"country": "DE", "vip": 1}))[1])[
        "customer.vip"] is False
    assert verdicts(judge(suite, answer(id="re-1"))[1])["id"] is False
    _, score = judge(suite, answer(total="12,50"))
    assert "locale" in score.detail["fields"]["total"]["why"]  # type: ignore[union-attr,index]


def test_json_fields_format_contract(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    assert judge(suite, "name: ACME")[0].reason == "no_object"
    assert judge(suite, answer() + answer())[0].reason == "multiple_objects"
    assert judge(suite, "```json\n" + answer() + "\n```")[1].correct  # type: ignore[union-attr]


def test_json_fields_at_output_field(tmp_path: Path) -> None:
    """With output_field set, the object is that field's value; the rest of the reply is
    ignored."""
    suite = load_suite(make(tmp_path, FIELDS + "output_field: invoice\n", [INVOICE]))
    assert suite.scorer.object_field == "invoice"
    assert judge(suite, json.dumps({"invoice": INVOICE, "why": "x"}))[1].correct  # type: ignore
    assert judge(suite, json.dumps({"invoice": "ACME"}))[0].reason == "not_an_object"
    assert judge(suite, answer())[0].reason == "missing_field"


def test_label_scorer_is_unchanged(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, "labels: [bug, feature]\n", ["Bug"]))
    assert suite.scorer.type == "label" and suite.cases[0].expected == "bug"
    reading, score = judge(suite, '{"label": " BUG "}')
    assert reading.value == "bug" and score == Score(True)
    assert judge(suite, '{"label": "other"}')[0].reason == "label_not_allowed"


def test_description_names_the_normalisation(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    record = suite.scorer.to_record()
    assert record["normalization"] == "assay.fold/1"
    words = describe(record)
    assert "NFKC" in words and "case-folded" in words and "total: numeric (abs_tol 0.01" in words
    assert describe(None).startswith("label")


# --------------------------------------------------------------------------- validation


def yaml_problems(tmp_path: Path, yaml_text: str, expected: list[Any] | None = None
                  ) -> list[str]:
    return problems(make(tmp_path, yaml_text, expected or ["x"]))


@pytest.mark.parametrize("yaml_text, where, msg", [
    ("scorer: fuzzy\n", "suite.yaml:1: field 'scorer.type'", "must be one of label, "),
    ("temperature: 0\nscorer:\n  type: numeric\n  abs_tol: -1\n",
     "suite.yaml:4: field 'scorer.abs_tol'", "must be a finite number >= 0"),
    ("scorer:\n  type: numeric\n  tolerance: 0.1\n", "suite.yaml:3: field 'scorer.tolerance'",
     "unknown option for scorer numeric (allowed: type, reads, abs_tol, rel_tol)"),
    ("scorer:\n  type: json_fields\n  reads: text\n  fields: {a: exact}\n",
     "suite.yaml:3: field 'scorer.reads'", "scorer json_fields reads json, not 'text'"),
    ("scorer: json_fields\n", "suite.yaml:1: field 'scorer.fields'",
     "must be a non-empty mapping"),
    ("scorer:\n  type: json_fields\n  fields:\n    a: exact\n    total: {rule: number}\n",
     "suite.yaml:5: field 'scorer.fields.total.rule'", "must be one of exact, normalized_text"),
    ("scorer:\n  type: json_fields\n  fields:\n    a:\n      rule: exact\n      abs_tol: 1\n",
     "suite.yaml:6: field 'scorer.fields.a.abs_tol'", "unknown option for rule exact"),
    ("scorer:\n  type: json_fields\n  fields:\n    a:\n      rule: json_fields\n",
     "suite.yaml:4: field 'scorer.fields.a.fields'", "must be a non-empty mapping"),
    ("labels: [a, b]\nscorer: normalized_text\n", "suite.yaml:1: field 'labels'",
     "labels apply to scorer label only, not normalized_text"),
    ("scorer: {type: judge, pass: {criterion: x, at_least: 2}}\n",
     "suite.yaml:1: field 'scorer.judge'", "must be the path of a judge.yaml"),
])
def test_scorer_config_errors_name_the_line_and_key(tmp_path: Path, yaml_text: str, where: str,
                                                    msg: str) -> None:
    found = yaml_problems(tmp_path, yaml_text)
    assert any(where in p and msg in p for p in found), found


@pytest.mark.parametrize("yaml_text, expected, field, msg", [
    (NUMERIC, "twelve", "expected", "must be a JSON number, got str 'twelve'"),
    (NUMERIC, True, "expected", "must be a JSON number, got bool"),
    (NUMERIC, "12", "expected", "must be a JSON number, got str '12'"),
    (NUMERIC, None, "expected", "must be a JSON number, got null"),
    ("scorer: normalized_text\n", 12, "expected", "must be a string, got int"),
    ("scorer: normalized_text\n", " !? ", "expected", "' !? ' is empty once normalised"),
    (FIELDS, "ACME", "expected", "must be a JSON object, got str"),
    (FIELDS, {k: v for k, v in INVOICE.items() if k != "total"}, "expected.total",
     "missing (the scorer lists this field)"),
    (FIELDS, {**INVOICE, "customer": {"country": "DE"}}, "expected.customer.vip", "missing"),
    (FIELDS, {**INVOICE, "total": "12.50"}, "expected.total", "must be a JSON number"),
    (FIELDS, {**INVOICE, "name": 5}, "expected.name", "must be a string, got int"),
    (FIELDS, {**INVOICE, "customer": []}, "expected.customer", "must be a JSON object, got list"),
    (FIELDS, {**INVOICE, "tax": 1}, "expected", "has fields the scorer does not list"),
])
def test_expected_values_are_checked_against_the_scorer(tmp_path: Path, yaml_text: str,
                                                        expected: Any, field: str,
                                                        msg: str) -> None:
    found = problems(make(tmp_path, yaml_text, [None], raw_lines=[
        json.dumps({"id": "ok", "input": "x", "expected": INVOICE if yaml_text == FIELDS
                    else ("a" if "normalized" in yaml_text else 1)}),
        json.dumps({"id": "bad", "input": "y", "expected": expected})]))
    assert any(f"cases.jsonl:2: field '{field}': {msg}" in p for p in found), found
    assert not any("cases.jsonl:1:" in p for p in found), found


def test_non_finite_expected_numbers_are_refused(tmp_path: Path) -> None:
    # Python's json reads NaN and Infinity; a tolerance cannot hold them
    found = problems(make(tmp_path, NUMERIC, [], raw_lines=[
        '{"id": "a", "input": "x", "expected": NaN}',
        '{"id": "b", "input": "y", "expected": -Infinity}']))
    assert any("cases.jsonl:1: field 'expected': must be finite" in p for p in found)
    assert any("cases.jsonl:2: field 'expected': must be finite" in p for p in found)


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    found = problems(make(tmp_path, NUMERIC, ["a", 1, "b"]))
    assert [p.split("cases.jsonl:")[1][:1] for p in found] == ["1", "3"]


def test_expected_keeps_its_type(tmp_path: Path) -> None:
    suite = load_suite(make(tmp_path, FIELDS, [INVOICE]))
    assert suite.cases[0].expected == INVOICE and suite.labels == ()
    assert suite.labels_source is None
    suite = load_suite(make(tmp_path / "n", NUMERIC, [3, 2.5]))
    assert [c.expected for c in suite.cases] == [3, 2.5]
