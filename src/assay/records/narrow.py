"""What a narrow-task run writes: one row per case and repeat, and the run's manifest.

Rows are written on the hot path (thousands a second). Building one through the model and
validating it costs about 5 µs (measured; ``model_construct`` is three times slower, being pure
Python), a thousandth of what the request around it costs, so writers validate too and readers
validate every row they read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from assay.records.base import Record
from assay.records.io import iter_rows
from assay.records.layout import MANIFEST, RAW_PREDICTIONS
from assay.records.manifest import ManifestBase, ModelInfo, check_row_schema, read_run_manifest


class NarrowRow(Record):
    """One case at one repeat: every answer text, the label used, and every HTTP try."""

    schema_name: ClassVar[str] = "assay.narrow.row"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = RAW_PREDICTIONS

    id: str
    """The case id from the suite's cases file."""
    repeat: int
    """Which repetition of the case this is (0-based); a key with ``id``."""
    expected: str | int | float | dict[str, Any] | None
    """What the case expects: the label (scorer ``label``), a text, a number or an object, as
    the scorer reads it; null for a judge case without a reference."""
    raw: str | None = None
    """Text of the answer used (the last one); None when no answer arrived."""
    raws: list[str | None] = []
    """Every answer text in order: one, or two when the format retry was sent."""
    label: str = ""
    """The label parsed from the answer used; empty when invalid, on an infra error, or when the
    scorer is not ``label`` (see ``answer``)."""
    correct: bool | None = None
    """The scorer's verdict (``label == expected`` for ``label``); None on an infra error (no
    verdict), an invalid answer is False."""
    answer: str | int | float | dict[str, Any] | None = None
    """What a scorer other than ``label`` read from the answer used (a text, a number, an
    object); absent for ``label`` rows, for invalid answers and in rows written before scorers."""
    score_detail: dict[str, Any] | None = None
    """How the scorer reached ``correct``: the normalised forms (``normalized_text``), the
    difference and the tolerance (``numeric``), ``fields`` with each field's verdict and reason
    (``json_fields``); absent when there is nothing to add (``label``, invalid answers)."""
    attempts: int = 0
    """Answers used for the format: 1, or 2 after a format retry."""
    invalid_reason: str | None = None
    """Why the answer used gives no valid label (None when it does)."""
    first_invalid_reason: str | None = None
    """Why the first answer was unusable, when a format retry was sent."""
    latency_ms: float | None = None
    """Time spent on the answers used, backoff waits excluded; None on an infra error."""
    usage: dict[str, Any] | None = None
    """Token usage summed over the answers; None when none reported it, ``incomplete`` set when
    only some did (a missing figure is unknown, not zero)."""
    served_model: str | None = None
    """The model id the endpoint said answered."""
    system_fingerprint: str | None = None
    """The endpoint's system fingerprint, when it sent one."""
    finish_reason: str | None = None
    """Why the endpoint stopped generating the answer used."""
    error: str | None = None
    """Set on an infra error: no usable answer; the case is asked again on resume."""
    tries: list[dict[str, Any]] = []
    """Every HTTP request: ``status``, ``ms``, and ``error`` / ``wait_s`` when there were."""
    fatal: bool | None = None
    """Present (true) only when this error stopped the run (bad key, model or URL)."""

    def to_row(self) -> dict[str, Any]:
        """The JSON object written; ``fatal`` only when set, as runs have always written it."""
        row = dict(self.__dict__)
        for key in ("fatal", "answer", "score_detail"):
            if row.get(key) is None:
                row.pop(key, None)
        return row


class NarrowSuiteInfo(Record):
    """Which suite was run, pinned by content hashes."""

    name: str
    """The suite's directory name."""
    path: str
    """Absolute path of the suite when the run started."""
    cases_file: str
    """The cases file, relative to the suite."""
    split: str | None = None
    """The split of the cases that was run, if one was chosen."""
    tier: str | None = None
    """The tier of ``suite.yaml`` that was run (``--tier``), if one was chosen; its cases'
    digest is ``cases_sha256``."""
    n_cases: int
    """Cases in the run (after the split)."""
    cases_sha256: str
    """sha256 of the cases run."""
    prompt_sha256: str
    """sha256 of the system prompt."""
    train_sha256: str | None = None
    """sha256 of the training file the built-in baseline learns from, when there is one."""
    labels: list[str]
    """The allowed labels, in order (empty when the scorer is not ``label``)."""
    labels_source: str | None = None
    """Where the labels came from: ``suite.yaml`` or the cases' expected values."""
    output_field: str
    """The JSON field the answer carries the label in."""
    scorer: dict[str, Any] | None = None
    """The scorer and its options as validated (``type``, ``reads``, tolerances, fields, the
    normalisation's id); null in runs from before scorers, which were scored by ``label``."""


class NarrowParameters(Record):
    """What the model was asked with."""

    temperature: float
    """Sampling temperature sent with every request."""
    repeats: int
    """How many times every case is asked."""
    max_tokens: int | None = None
    """``max_tokens`` sent, if any."""
    format_retries: int = 1
    """Format retries per case (one: an unusable answer is asked again once)."""


class NarrowManifest(ManifestBase):
    """A narrow run: written before the first call, then grown with served models, fingerprints
    and sessions."""

    schema_name: ClassVar[str] = "assay.narrow.manifest"
    schema_version: ClassVar[int] = 1

    kind: Literal["narrow"] = "narrow"
    """Always ``narrow``."""
    suite: NarrowSuiteInfo
    """The suite that was run."""
    model: ModelInfo
    """The model as asked and as served."""
    parameters: NarrowParameters
    """What the model was asked with."""


ROW_SCHEMAS = {RAW_PREDICTIONS: NarrowRow.schema_id()}


def read_narrow_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest of a narrow run, validated (a newer schema is a RecordError)."""
    return read_run_manifest(run_dir, NarrowManifest)


def iter_narrow_rows(run_dir: Path, manifest: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every complete row of ``raw_predictions.jsonl``, validated, one at a time (a report over
    100,000 rows never holds them all); rows of a newer schema are refused up front."""
    path = run_dir / RAW_PREDICTIONS
    check_row_schema(manifest, RAW_PREDICTIONS, NarrowRow, run_dir / MANIFEST)
    for row in iter_rows(path):
        NarrowRow.read(row, path)
        yield row
