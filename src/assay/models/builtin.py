"""Built-in local models: the bar an LLM must beat, and a plumbing check.

``builtin/baseline`` is an honest non-LLM classifier (multinomial naive Bayes over word unigrams
and bigrams, trained on the suite's ``data/train.jsonl``). If a model cannot beat it, the suite
or the model is not worth an afternoon. ``builtin/oracle`` answers the expected label, so a run
against it must score 100%: anything less is a bug in assay or the suite, not in a model.

Both answer with the suite's JSON object and are served over HTTP (see ``server.py``) so they go
through exactly the same client, parser and records as a real endpoint.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from assay.suites.cases import NarrowSuite
from assay.suites.coding import CodingSuite
from assay.suites.prompts import user_prompt
from assay.suites.scorer_config import contract_reply

BUILTIN_PREFIX = "builtin/"
BUILTIN_MODELS = ("builtin/baseline", "builtin/oracle")

_TOKEN = re.compile(r"[a-z0-9_]+(?:'[a-z]+)?")


class BuiltinModel(Protocol):
    name: str
    fingerprint: str

    def answer(self, messages: Sequence[dict[str, str]]) -> str: ...


def case_input(messages: Sequence[dict[str, str]]) -> str:
    """The case text is the first user message; later ones are the format-retry instruction."""
    for m in messages:
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


def features(text: str) -> list[str]:
    words = _TOKEN.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]


class NaiveBayes:
    """Multinomial naive Bayes with add-one smoothing; deterministic, trains in milliseconds."""

    def __init__(self, texts: Sequence[str], labels: Sequence[str], classes: Sequence[str]):
        import numpy as np  # here, not at import: `assay run` against an endpoint never needs it

        if not texts:
            raise ValueError("no training examples")
        self.classes = list(classes)
        vocab: dict[str, int] = {}
        docs = [Counter(features(t)) for t in texts]
        for doc in docs:
            for tok in doc:
                vocab.setdefault(tok, len(vocab))
        counts = np.ones((len(self.classes), len(vocab) + 1))  # +1 column: unseen tokens
        prior = np.ones(len(self.classes))
        index = {c: i for i, c in enumerate(self.classes)}
        for doc, label in zip(docs, labels, strict=True):
            row = index[label]
            prior[row] += 1
            for tok, n in doc.items():
                counts[row, vocab[tok]] += n
        self.vocab = vocab
        self.log_prior = np.log(prior / prior.sum())
        self.log_like = np.log(counts / counts.sum(axis=1, keepdims=True))
        digest = hashlib.sha256()
        digest.update(json.dumps(self.classes).encode())
        digest.update(self.log_like.tobytes())
        self.fingerprint = "nb-" + digest.hexdigest()[:16]

    def predict(self, text: str) -> str:
        import numpy as np

        doc = Counter(features(text))
        scores = self.log_prior.copy()
        unseen = len(self.vocab)
        for tok, n in doc.items():
            scores += n * self.log_like[:, self.vocab.get(tok, unseen)]
        return self.classes[int(np.argmax(scores))]


class Baseline:
    name = "builtin/baseline"

    def __init__(self, suite: NarrowSuite) -> None:
        if suite.scorer.type != "label":
            raise ValueError(f"builtin/baseline is a classifier: it answers suites scored by "
                             f"label, not {suite.scorer.type}")
        train = suite.train_cases()
        self.output_field = suite.config.output_field
        self.model = NaiveBayes([c.input for c in train], [str(c.expected) for c in train],
                                suite.labels)
        self.fingerprint = self.model.fingerprint

    def answer(self, messages: Sequence[dict[str, str]]) -> str:
        return json.dumps({self.output_field: self.model.predict(case_input(messages))})


class Oracle:
    """Answers every case with its expected value in the form the suite's scorer reads (the
    label or text or number at the output field, the object, or the bare text)."""

    name = "builtin/oracle"

    def __init__(self, suite: NarrowSuite) -> None:
        self.output_field = suite.config.output_field
        self.scorer = suite.scorer
        self.expected = {c.input: c.expected for c in suite.cases}
        self.fingerprint = "oracle-" + suite.cases_sha256[:16]

    def answer(self, messages: Sequence[dict[str, str]]) -> str:
        text = case_input(messages)
        if text not in self.expected:
            return "I do not know this case."  # visible as an invalid answer, never a guess
        return contract_reply(self.scorer, self.output_field, self.expected[text])


class CodingOracle:
    """Answers every coding task with its reference solution, fenced like a model would: a run
    against it checks extraction, sandbox and graders together (rubric tasks get no answer)."""

    name = "builtin/oracle"

    def __init__(self, suite: CodingSuite) -> None:
        self.answers: dict[str, str] = {}
        for task in suite.tasks:
            if task.solution is None:
                continue
            tag = "diff" if task.type == "diff" else (task.language or "")
            self.answers[user_prompt(task)] = f"```{tag}\n{task.solution.rstrip()}\n```\n"
        self.fingerprint = "oracle-" + suite.sha256[:16]

    def answer(self, messages: Sequence[dict[str, str]]) -> str:
        return self.answers.get(case_input(messages), "No reference answer for this task.")


def load_builtin(name: str, suite: NarrowSuite | CodingSuite) -> BuiltinModel:
    if isinstance(suite, CodingSuite):
        if name == "builtin/oracle":
            return CodingOracle(suite)
        raise ValueError(f"{name} answers narrow-task suites only; coding suites have "
                         "builtin/oracle (their reference solutions)")
    if name == "builtin/baseline":
        return Baseline(suite)
    if name == "builtin/oracle":
        return Oracle(suite)
    raise ValueError(f"unknown built-in model {name!r} (known: {', '.join(BUILTIN_MODELS)})")
