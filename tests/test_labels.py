"""Every rule of the answer parser, one answer text at a time."""

from __future__ import annotations

import pytest

from assay.grading.answers.labels import parse_answer
from assay.grading.model_text import find_top_level_objects, strip_reasoning

LABELS = ("bug", "feature", "question")


def parse(text: str | None, **kw: object):
    return parse_answer(text, output_field="label", labels=LABELS, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, label", [
    ('{"label": "bug"}', "bug"),
    ('  {"label": "  Feature "}\n', "feature"),  # stripped and lower-cased
    ('Sure! Here it is: {"label": "question"} Hope that helps.', "question"),  # prose around
    ('```json\n{"label": "bug"}\n```', "bug"),  # fenced
    ('Answer:\n```\n{"label": "feature"}\n```\nDone.', "feature"),
    ('<think>maybe {"label": "bug"}? no</think>{"label": "feature"}', "feature"),
    ('<thinking>\nlong\n</thinking>\n\n{"label": "question"}', "question"),
    ('reasoning without an opening tag</think>{"label": "bug"}', "bug"),
    ('{"label": "bug", "confidence": 0.9, "why": {"a": 1}}', "bug"),  # extra fields fine
    ('use {curly} words {"label": "bug"}', "bug"),  # a stray brace does not hide the answer
])
def test_valid_answers(text: str, label: str) -> None:
    p = parse(text)
    assert p.reason is None, p
    assert p.label == label


@pytest.mark.parametrize("text, reason", [
    (None, "empty"),
    ("", "empty"),
    ("   \n\t ", "empty"),
    ("<think>only thoughts</think>", "empty"),
    ("bug", "no_object"),
    ("The label is bug.", "no_object"),
    ("{'label': 'bug'}", "not_json"),  # single quotes
    ('{"label": "bug",}', "not_json"),  # trailing comma
    ('{"label": NaN}', "not_json"),  # NaN is not JSON
    ('{"label": "bug"} {"label": "feature"}', "multiple_objects"),
    ('{"category": "bug"}', "missing_field"),
    ('{"label": 3}', "missing_field"),
    ('{"label": null}', "missing_field"),
    ('{"label": "enhancement"}', "label_not_allowed"),
    ('["bug"]', "no_object"),
])
def test_invalid_answers(text: str | None, reason: str) -> None:
    p = parse(text)
    assert p.reason == reason, p
    assert p.label == ""


def test_refusal_wins_over_content() -> None:
    p = parse('{"label": "bug"}', refusal="I can't help with that.")
    assert p.reason == "refusal" and p.label == ""


def test_fence_content_is_used_even_when_prose_has_another_object() -> None:
    # The fenced block is the answer; an example object in the surrounding prose is ignored.
    text = 'Format is {"label": "x"}.\n```json\n{"label": "bug"}\n```'
    assert parse(text).label == "bug"


def test_nested_objects_count_once() -> None:
    objs, saw = find_top_level_objects('x {"a": {"b": {"c": 1}}} y')
    assert saw and objs == [{"a": {"b": {"c": 1}}}]


def test_strip_reasoning_is_case_insensitive() -> None:
    assert strip_reasoning("<THINK>x</THINK> answer") == "answer"


def test_custom_output_field() -> None:
    p = parse_answer('{"verdict": "Bug"}', output_field="verdict", labels=LABELS)
    assert p.label == "bug"
    assert parse_answer('{"label": "bug"}', output_field="verdict",
                        labels=LABELS).reason == "missing_field"
