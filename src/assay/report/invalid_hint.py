"""The hint a narrow run ends with when most of its invalid answers share one reason.

An invalid answer is one the scorer could not read; when most of them fail the same way, the
cause is almost always the prompt's reply contract, not the model (a prompt that asks for "the
label only" while the scorer reads ``{"label": …}``: ``no_object`` on every answer). The hint
names the fix for that reason. It is built from the report alone, so ``assay report`` on an old
run says the same.
"""

from __future__ import annotations

from typing import Any

#: what to do about each invalid reason; ``{shape}`` is the reply the scorer reads
FIXES = {
    "no_object": "the replies hold no JSON object. The scorer reads {shape}: make the prompt "
                 "ask for exactly that (e.g. \"Respond with only a JSON object of the form "
                 "{shape}\"), or choose a scorer that reads the bare text "
                 "(scorer: {{type: normalized_text, reads: text}})",
    "not_json": "the replies hold no readable JSON. The scorer reads {shape}: make the prompt "
                "ask for exactly that",
    "missing_field": "the replies' JSON object lacks the key the scorer reads. The prompt must "
                     "name it: {shape}",
    "multiple_objects": "the replies hold more than one JSON object: ask for one, {shape}, and "
                        "nothing else",
    "label_not_allowed": "the replies name labels the suite does not have: list the labels in "
                         "the prompt exactly as suite.yaml spells them ({shape})",
    "not_a_number": "the replies give no number where the scorer reads one: ask for {shape}",
    "not_an_object": "the replies give no object where the scorer reads one: ask for {shape}",
    "empty": "the replies are empty (or only a reasoning block): look at max_tokens and at "
             "finish_reason in report.md",
    "refusal": "the model refused: read the refusals in report.md before changing the prompt",
}


def reply_shape(rep: dict[str, Any]) -> str:
    """The reply the run's scorer read, as far as the report says it."""
    scorer = rep.get("scorer") or {}
    config = scorer.get("config") or {}
    field = scorer.get("output_field") or "label"
    kind = scorer.get("type", "label")
    if kind == "label" and rep.get("labels"):
        return f'{{"{field}": "<{"|".join(rep["labels"])}>"}}'
    if kind == "json_fields":
        inner = "{" + ", ".join(f'"{name}": …' for name in (config.get("fields") or {})) + "}"
        where = config.get("object_field")
        return inner if where is None else f'{{"{where}": {inner}}}'
    return f'{{"{field}": …}}'


def invalid_hint(rep: dict[str, Any]) -> str | None:
    """One sentence when more than half of the invalid answers share a reason and they are
    not a stray few (at least two, and a tenth of the answers); None otherwise."""
    reasons: dict[str, int] = rep.get("invalid_reasons") or {}
    invalid = sum(reasons.values())
    if invalid < max(2, 0.1 * (rep.get("n") or 0)):
        return None
    reason, count = max(sorted(reasons.items()), key=lambda kv: kv[1])
    if 2 * count <= invalid or reason not in FIXES:
        return None
    fix = FIXES[reason].format(shape=reply_shape(rep))
    return (f"{count} of {invalid} invalid answers are {reason}: {fix}. "
            "`assay suite check SUITE` checks a prompt's reply format without a model.")


__all__ = ["FIXES", "invalid_hint", "reply_shape"]
