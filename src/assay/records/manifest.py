"""The run manifest: everything needed to tell whether two runs can be compared.

It is frozen before the first model call (so a crash still leaves a record of what was asked)
and then only grows: served model ids, fingerprints and session time windows are added as they
become known, each time by an atomic rewrite.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, ClassVar, Literal, TypedDict

from pydantic import ConfigDict, Field

from assay.errors import RecordError
from assay.records.base import Record
from assay.records.clock import utc_now
from assay.records.io import atomic_write_json, read_json_file
from assay.records.layout import MANIFEST
from assay.records.statuses import RunStatus, SuiteKind
from assay.version import __version__


class RunSession(TypedDict, total=False):
    """One invocation of a model run, in ``manifest.json``'s ``sessions``."""

    started_at: str
    ended_at: str | None
    status: RunStatus | Literal["running"]  # running: under way, or the runner was killed
    pid: int
    limits: dict[str, Any] | None  # the limits this session ran under
    rows_written: int
    infra_errors: int


@functools.cache
def tool_identity() -> dict[str, Any]:
    """assay's version and, when it runs from a git checkout, the exact commit and dirtiness
    (``records.experiment.ToolIdentity`` reads it back)."""
    src = Path(__file__).resolve().parents[1]
    ident: dict[str, Any] = {"version": __version__, "git_commit": None, "git_dirty": None,
                             "python": platform.python_version()}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=src,
                                capture_output=True, text=True, timeout=5, check=True).stdout
        ident["git_commit"] = commit or None
        ident["git_dirty"] = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return ident


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest as written, unvalidated: every kind of run has one. Readers that depend on
    its shape validate it with :func:`read_run_manifest`."""
    path = run_dir / MANIFEST
    try:
        return read_json_file(path)
    except FileNotFoundError:
        raise RecordError(f"{path}: no manifest: not an assay run directory") from None


class ModelInfo(Record):
    """The model as asked for and as the endpoint said it served."""

    requested: str
    """The model name sent with every request."""
    builtin: bool = False
    """True for ``builtin/...`` models served by assay itself."""
    base_url: str
    """The endpoint, with any credentials and query removed."""
    api_key_env: str | None = None
    """The variable the key was read from (never the key)."""
    served_models: list[str] = []
    """Every model id the endpoint reported, in order of first appearance."""
    system_fingerprints: list[str] = []
    """Every system fingerprint the endpoint reported."""


class ManifestBase(Record):
    """What every model-run manifest holds; ``schema`` names the kind and version."""

    schema_name: ClassVar[str] = ""

    schema_: str = Field(alias="schema")
    """``name/version`` of this manifest's schema."""
    kind: SuiteKind
    """``narrow`` or ``coding``: which reader understands the run."""
    run_id: str
    """The run directory's name when the run started."""
    assay: dict[str, Any]
    """assay's version, git commit and dirtiness, and the Python version."""
    limits: dict[str, Any]
    """Resource settings of the latest session (they may change on resume)."""
    comparable: dict[str, Any]
    """Settings that must be identical for two sessions to write one run (resume checks)."""
    record_schemas: dict[str, str] | None = None
    """Schema id of each JSONL file's rows (rows carry none each); None in runs from before
    rows were versioned, which read as version 1."""
    started_at: str
    """UTC time the run was created."""
    ended_at: str | None = None
    """UTC time the latest session ended."""
    warnings: list[str] = []
    """Things a reader must know (served model changed mid-run, ...)."""
    sessions: list[dict[str, Any]] = []
    """One entry per invocation: time window, status, pid, limits, rows written."""

    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def read_run_manifest(run_dir: Path, model: type[ManifestBase]) -> dict[str, Any]:
    """The manifest of a run of ``model``'s kind, validated; refused when written by a newer
    assay, when of another kind, or when a row file's schema is newer than this assay reads."""
    data = read_manifest(run_dir)
    where = run_dir / MANIFEST
    model.check_schema_id(data.get("schema"), where)
    model.read(data, where)
    return data


def check_row_schema(manifest: dict[str, Any], file: str, row: type[Record],
                     where: Path | str) -> None:
    """Refuse rows of ``file`` written with another or a newer schema than ``row``."""
    schemas = manifest.get("record_schemas")
    if schemas is None:
        return  # written before rows were versioned: version 1
    if not isinstance(schemas, dict) or file not in schemas:
        raise RecordError(f"{where}: record_schemas names no schema for {file}")
    row.check_schema_id(schemas[file], f"{where}: {file}")


class ManifestWriter:
    """Holds the manifest in memory and rewrites it atomically on every meaningful change."""

    def __init__(self, run_dir: Path, data: dict[str, Any]) -> None:
        self.path = run_dir / MANIFEST
        self.data = data

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    def note_served(self, served_model: str | None, fingerprint: str | None) -> str | None:
        """Record a served model id / system fingerprint; return a warning when it changed
        mid-run, since answers from two different backends are not one measurement."""
        model = self.data["model"]
        warning = None
        changed = False
        if served_model and served_model not in model["served_models"]:
            model["served_models"].append(served_model)
            changed = True
            if len(model["served_models"]) > 1:
                warning = f"served model changed mid-run: {model['served_models']}"
        if fingerprint and fingerprint not in model["system_fingerprints"]:
            model["system_fingerprints"].append(fingerprint)
            changed = True
            if len(model["system_fingerprints"]) > 1:
                warning = f"system_fingerprint changed mid-run: {model['system_fingerprints']}"
        if warning and warning not in self.data["warnings"]:
            self.data["warnings"].append(warning)
        if changed:
            self.save()
        return warning

    def start_session(self) -> RunSession:
        """A time window per invocation; a resumed run may apply other limits (say a lower
        concurrency), so each session keeps the limits it ran under."""
        session = RunSession(started_at=utc_now(), ended_at=None, status="running",
                             pid=os.getpid(), limits=self.data.get("limits"))
        self.data.setdefault("sessions", []).append(session)
        self.save()
        return session

    def end_session(self, session: RunSession, status: RunStatus, *, rows_written: int,
                    infra_errors: int) -> None:
        session["ended_at"] = utc_now()
        session["status"] = status
        session["rows_written"] = rows_written
        session["infra_errors"] = infra_errors
        self.data["ended_at"] = session["ended_at"]
        self.save()
