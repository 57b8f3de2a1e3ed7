"""What a model is sent: a suite's fixed prompt and one case or task, as chat messages.

The prompt is part of the suite (its hash is in the manifest), so building it lives with the
suite, where the runner that sends it, the built-in oracle that must recognise it and the tests
all find the same text.
"""

from __future__ import annotations

from collections.abc import Iterable

from assay.suites.cases import Case, NarrowSuite
from assay.suites.coding import CodingTask
from assay.suites.scorer_config import ScorerSpec

Messages = list[dict[str, str]]

#: The one fixed instruction per coding task type; recorded in the coding manifest.
INSTRUCTIONS = {
    "unit": "Return only the code, in a single fenced code block, with no explanation.",
    "rubric": "Return only the code, in a single fenced code block, with no explanation.",
    "diff": ("Return only a unified diff (with --- a/ and +++ b/ file headers) that applies to "
             "the files above, in a single fenced code block, with no explanation."),
}


def narrow_messages(suite: NarrowSuite, case: Case) -> Messages:
    return [{"role": "system", "content": suite.system_prompt},
            {"role": "user", "content": case.input}]


def retry_instruction(output_field: str, labels: Iterable[str]) -> str:
    """The one format-retry message: what exactly to send back, nothing else."""
    choices = ", ".join(f'"{x}"' for x in labels)
    return (
        "Your previous answer could not be used. Reply with only one JSON object and nothing "
        f'else, exactly of the form {{"{output_field}": "<one of {choices}>"}}.'
    )


def format_retry(messages: Messages, answer: str | None, output_field: str,
                 labels: Iterable[str]) -> Messages:
    """The conversation so far, the unusable answer, and the retry instruction."""
    return retry_with(messages, answer, retry_instruction(output_field, labels))


def retry_with(messages: Messages, answer: str | None, instruction: str) -> Messages:
    """The conversation so far, the unusable answer, and ``instruction``."""
    return messages + [
        {"role": "assistant", "content": answer or ""},
        {"role": "user", "content": instruction},
    ]


_UNUSABLE = "Your previous answer could not be used. "


def scorer_retry_instruction(scorer: ScorerSpec, output_field: str,
                             labels: Iterable[str]) -> str:
    """The one format-retry message for a suite's scorer: for a scorer that reads JSON, the
    exact object to send back; for one that reads text, only a non-empty answer."""
    if scorer.type == "label":
        return retry_instruction(output_field, labels)
    if scorer.reads == "text":
        what = "only the number" if scorer.type == "numeric" else "only the answer"
        return _UNUSABLE + f"Reply with {what}, nothing else."
    only = "Reply with only one JSON object and nothing else, exactly of the form "
    if scorer.type == "numeric":
        return _UNUSABLE + only + f'{{"{output_field}": <a JSON number, e.g. 12.5>}}.'
    if scorer.type == "json_fields":
        inner = "{" + ", ".join(f'"{name}": ...' for name, _ in scorer.fields) + "}"
        shape = inner if scorer.object_field is None else f'{{"{scorer.object_field}": {inner}}}'
        return _UNUSABLE + only + shape + "."
    return _UNUSABLE + only + f'{{"{output_field}": "<your answer as text>"}}.'



def user_prompt(task: CodingTask) -> str:
    """The task prompt plus one fixed instruction; diff tasks also show the files to change."""
    parts = [task.prompt.rstrip()]
    if task.type == "diff":
        for name, text in task.files.items():
            body = text if text.endswith("\n") else text + "\n"
            parts.append(f"File `{name}`:\n```\n{body}```")
    parts.append(INSTRUCTIONS[task.type])
    return "\n\n".join(parts)


def coding_messages(task: CodingTask) -> Messages:
    msgs = [{"role": "system", "content": task.system}] if task.system else []
    return msgs + [{"role": "user", "content": user_prompt(task)}]
