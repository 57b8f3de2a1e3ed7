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


def outer_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the reply's one JSON object, None) or (None, what is wrong), read where the reply's
    JSON opens: at its first ``[`` or ``{``. A strict reading for a reply that must be one
    object (a judge's): an object cut off or broken there is reported as such, never read
    from an object nested inside it, and a list around an object is a list, not the object
    (:func:`find_top_level_objects` skips what does not parse, which suits a label in prose)."""
    opened = re.search(r"[\[{]", text)
    if opened is None:
        return None, "the reply has no JSON object"
    start = opened.start()
    if text[start] == "[":
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, list):
            return None, "the reply is a JSON list, not one object: send the object alone"
        start = text.find("{", start)  # a bracket in prose, e.g. "[1]": the object follows
        if start == -1:
            return None, "the reply has no JSON object"
    try:
        obj, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        at = getattr(exc, "pos", None)
        where = "" if at is None else f" at character {at}"
        return None, (f"the reply's JSON object is broken{where} (cut off, or not strict "
                      "JSON): send one complete object")
    if not isinstance(obj, dict):
        return None, "the reply has no JSON object"
    more, _ = find_top_level_objects(text[end:])
    if more:
        return None, f"the reply has {1 + len(more)} JSON objects; send exactly one"
    return obj, None

