"""Turning a model's answer text into a label, or into a named reason why it is not one.

Model output is data, never instructions: we only ever look for one JSON object in it. The rules
are strict on purpose (a real JSON parser, exactly one top-level object) but forgiving about what
models commonly wrap around an answer (reasoning blocks, code fences, a sentence of prose), so
that "invalid output" measures what a production parser would reject.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from assay.grading.model_text import find_top_level_objects, strip_reasoning
from assay.suites.prompts import retry_instruction

#: Why an answer gives no valid value (a narrow row's ``invalid_reason``).
InvalidReason = Literal["empty", "not_json", "no_object", "multiple_objects", "missing_field",
                        "label_not_allowed", "refusal", "not_a_number", "not_an_object"]
INVALID_REASONS: tuple[InvalidReason, ...] = get_args(InvalidReason)

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    label: str  # "" when invalid
    reason: InvalidReason | None  # None when valid
    detail: str | None = None

    @property
    def valid(self) -> bool:
        return self.reason is None


def read_text(text: str | None, refusal: str | None = None
              ) -> tuple[str | None, InvalidReason | None, str | None]:
    """(the reply without its reasoning blocks, or None; the invalid reason; its detail): what
    a scorer that reads free text gets. Only a refusal or an empty reply is invalid."""
    if refusal:
        return None, "refusal", refusal[:200]
    if text is None or not text.strip():
        return None, "empty", None
    body = strip_reasoning(text)
    if not body:
        return None, "empty", "only a reasoning block"
    return body, None, None


def read_object(text: str | None, refusal: str | None = None
                ) -> tuple[dict[str, Any] | None, InvalidReason | None, str | None]:
    """(the one strict JSON object of the reply, or None; the invalid reason; its detail): the
    format contract every scorer that reads JSON shares."""
    body, why, detail = read_text(text, refusal)
    if body is None:
        return None, why, detail
    saw_brace = False
    for tier in _regions(body):
        objects: list[dict[str, Any]] = []
        for region in tier:
            found, braces = find_top_level_objects(region)
            objects += found
            saw_brace = saw_brace or braces
        if len(objects) > 1:
            return None, "multiple_objects", f"{len(objects)} objects"
        if objects:
            return objects[0], None, None
    if saw_brace:
        return None, "not_json", "braces present but no strict JSON object parses"
    return None, "no_object", None


def _regions(body: str) -> list[list[str]]:
    """Where the answer's object may be, most likely first: fenced blocks tagged ``json`` or
    not tagged at all, then the text around the fences, then blocks tagged with another
    language (a model that shows code before ``Answer: {...}`` puts the answer outside the
    fence, and a JavaScript ``{}`` must not hide it). Every block is looked at, not just the
    first; the first tier holding an object decides, and two objects there are ambiguous."""
    json_blocks: list[str] = []
    code_blocks: list[str] = []
    for fence in _FENCE.finditer(body):
        tag = fence.group(0)[3:].split("\n", 1)[0].strip().lower()
        (json_blocks if tag in ("", "json", "jsonc", "json5") else code_blocks).append(
            fence.group(1))
    around = _FENCE.sub("\n", body)
    return [json_blocks, [around], code_blocks]


def parse_answer(text: str | None, *, output_field: str, labels: Iterable[str],
                 refusal: str | None = None) -> Parsed:
    """Apply the suite's parsing rules to one answer."""
    obj, why, detail = read_object(text, refusal)
    if obj is None:
        return Parsed("", why, detail)
    value = obj.get(output_field)
    if not isinstance(value, str):
        got = "absent" if output_field not in obj else type(value).__name__
        return Parsed("", "missing_field", f"{output_field!r} {got}")
    label = value.strip().lower()
    allowed = set(labels)
    if label not in allowed:
        return Parsed("", "label_not_allowed", repr(label)[:100])
    return Parsed(label, None)


__all__ = ["INVALID_REASONS", "InvalidReason", "Parsed", "find_top_level_objects",
           "parse_answer", "read_object", "read_text", "retry_instruction", "strip_reasoning"]
