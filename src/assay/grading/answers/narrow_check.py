"""``assay suite check`` on a narrow suite: is the suite sound, before any model is blamed?

A narrow suite has no reference solutions; what can be wrong with it without a model is its
reply contract. The scorer reads one shape of reply (``{"label": "bug"}``, a number at a
field, an object, or the bare text); a prompt that asks for something else ("Answer with the
label only.") makes every answer of a capable model invalid, while ``builtin/oracle``, which
answers in the contract, scores 100% and hides it. So the check, through the same scorer a run
uses and without a model:

- the prompt names the reply format: a scorer that reads JSON needs the prompt to spell the
  field it reads as a JSON key (``"label"``), or to ask for JSON at all for a whole object;
- every case's expected value, given back in the contract, is read and scored right (a label
  the scorer would not accept, an expected value its rule cannot match);
- an empty reply is invalid, and every label is expected by some case.

A judge scorer's verdicts need its model: its cases are only read, not scored.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from assay.grading.answers.scorers import scorer_for
from assay.suites.cases import NarrowSuite
from assay.suites.scorer_config import contract_reply, contract_shape, reads_json

#: cases named one by one in a finding; the rest are counted
SHOWN = 5


@dataclass(frozen=True)
class Finding:
    """One thing checked: its name, whether it holds, and what a person reads."""

    name: str
    ok: bool
    detail: str


@dataclass
class NarrowCheck:
    """The findings on one narrow suite; ``sound`` when every one holds."""

    suite: NarrowSuite
    shape: str  # the reply the scorer reads, e.g. {"label": "<bug|feature|question>"}
    example: str  # the first case's expected value in the contract
    findings: list[Finding] = field(default_factory=list)

    @property
    def sound(self) -> bool:
        return all(f.ok for f in self.findings)


def names_the_format(suite: NarrowSuite) -> Finding:
    """The prompt spells the reply the scorer reads (the field as a JSON key, or JSON)."""
    prompt = suite.system_prompt
    where = suite.prompt_path.relative_to(suite.root)
    spec = suite.scorer
    if not reads_json(spec):
        return Finding("prompt names the reply format", True,
                       "the scorer reads the bare reply text: any wording works")
    key = (spec.object_field if spec.type == "json_fields" else suite.config.output_field)
    shape = contract_shape(spec, suite.config.output_field, suite.labels)
    if key is not None:
        if re.search(r'"' + re.escape(key) + r'"\s*:', prompt):
            return Finding("prompt names the reply format", True,
                           f'{where} asks for the key "{key}"')
        return Finding("prompt names the reply format", False,
                       f'{where} never shows the reply the scorer reads, a JSON object with '
                       f'the key "{key}": ask for it, e.g. "Respond with only a JSON object '
                       f'of the form {shape}", or choose a scorer that reads the bare text '
                       "(scorer: {type: normalized_text, reads: text})")
    if "json" in prompt.lower() or "{" in prompt:
        return Finding("prompt names the reply format", True, f"{where} asks for JSON")
    return Finding("prompt names the reply format", False,
                   f"{where} never asks for the JSON object the scorer reads ({shape})")


async def _contract_findings(suite: NarrowSuite) -> list[Finding]:
    scorer = scorer_for(suite)
    try:
        unread: list[str] = []
        wrong: list[str] = []
        for case in suite.cases:
            reading = scorer.read(contract_reply(suite.scorer, suite.config.output_field,
                                                 case.expected), None)
            if not reading.valid:
                unread.append(f"{case.id} (line {case.line}: {reading.reason})")
            elif suite.scorer.type != "judge":
                if not (await scorer.score(reading.value, case)).correct:
                    wrong.append(f"{case.id} (line {case.line})")
        empty = scorer.read("", None)
    finally:
        await scorer.aclose()
    n = len(suite.cases)
    out = [_listed("every expected value reads back in the contract", unread, n,
                   "the scorer cannot read the reply that gives the expected value"),
           Finding("an empty reply is invalid", not empty.valid,
                   f"read as {'invalid (' + empty.reason + ')' if empty.reason else 'valid'}")]
    if suite.scorer.type == "judge":
        out.append(Finding("every expected value scores right", True,
                           "not scored: the judge scorer needs its model"))
    else:
        out.append(_listed("every expected value scores right", wrong, n,
                           "the expected value, given back, is scored wrong"))
    return out


def _listed(name: str, bad: list[str], n: int, why: str) -> Finding:
    if not bad:
        return Finding(name, True, f"{n} of {n} cases")
    more = f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
    return Finding(name, False, f"{why}: {', '.join(bad[:SHOWN])}{more}")


def _labels_used(suite: NarrowSuite) -> Finding:
    expected = {c.expected for c in suite.cases if isinstance(c.expected, str)}
    unused = [label for label in suite.labels if label not in expected]
    counts = ", ".join(f"{label} {sum(1 for c in suite.cases if c.expected == label)}"
                       for label in suite.labels)
    if unused:
        return Finding("every label is expected by some case", False,
                       f"no case expects {', '.join(unused)} (cases per label: {counts})")
    return Finding("every label is expected by some case", True, f"cases per label: {counts}")


def check_narrow_suite(suite: NarrowSuite) -> NarrowCheck:
    """Every check above, on a suite already loaded (and so already validated: cases, labels
    and ``suite.yaml`` name their file, line and field when wrong)."""
    first = suite.cases[0].expected if suite.cases else ""
    check = NarrowCheck(suite=suite,
                        shape=contract_shape(suite.scorer, suite.config.output_field,
                                             suite.labels),
                        example=contract_reply(suite.scorer, suite.config.output_field, first))
    check.findings.append(names_the_format(suite))
    check.findings += asyncio.run(_contract_findings(suite))
    if suite.scorer.type == "label":
        check.findings.append(_labels_used(suite))
    return check


__all__ = ["Finding", "NarrowCheck", "check_narrow_suite", "names_the_format"]
