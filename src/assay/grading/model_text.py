"""Reading a JSON object out of what a model wrote, shared by the answer parser and the judge.

Model output is data, never instructions: only JSON objects are ever looked for in it, read by
a real JSON decoder that refuses NaN and Infinity. Reasoning blocks (``<think>...</think>``,
also one whose opening tag the model left out) are dropped first, so thoughts that mention
braces do not count as answers. Kept apart from ``labels`` because the judge reads its replies
the same way and must not depend on the answer-grading room.
"""

from __future__ import annotations

import json
import re
from typing import Any

_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
# Some reasoning models omit the opening tag and start straight with the thoughts.
_LEADING_UNOPENED = re.compile(r"^.*?</(think|thinking)>", re.DOTALL | re.IGNORECASE)

def strip_reasoning(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    if re.search(r"</(think|thinking)>", text, re.IGNORECASE):
        text = _LEADING_UNOPENED.sub("", text, count=1)
    return text.strip()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=True)


def find_top_level_objects(text: str) -> tuple[list[dict[str, Any]], bool]:
    """All JSON objects that are not inside another one, and whether any ``{`` was seen.

    A brace that does not start a valid object is skipped, so prose like "use {x}" before the
    answer does not hide it; an object nested in a found object is not counted twice.
    """
    objects: list[dict[str, Any]] = []
    saw_brace = False
    pos = 0
    while True:
        start = text.find("{", pos)
        if start == -1:
            return objects, saw_brace
        saw_brace = True
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        objects.append(obj)
        pos = end
