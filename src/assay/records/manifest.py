"""The run manifest: everything needed to tell whether two runs can be compared.

It is frozen before the first model call (so a crash still leaves a record of what was asked)
and then only grows: served model ids, fingerprints and session time windows are added as they
become known, each time by an atomic rewrite.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_json, read_json_file
from assay.version import __version__

MANIFEST = "manifest.json"


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@functools.cache
def tool_identity() -> dict[str, Any]:
    """assay's version and, when it runs from a git checkout, the exact commit and dirtiness."""
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
    path = run_dir / MANIFEST
    try:
        return read_json_file(path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path}: no manifest: not an assay run directory") from exc


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

    def start_session(self) -> dict[str, Any]:
        """A time window per invocation; a resumed run may apply other limits (say a lower
        concurrency), so each session keeps the limits it ran under."""
        session = {"started_at": utc_now(), "ended_at": None, "status": "running",
                   "pid": os.getpid(), "limits": self.data.get("limits")}
        self.data.setdefault("sessions", []).append(session)
        self.save()
        return session

    def end_session(self, session: dict[str, Any], status: str, **extra: Any) -> None:
        session["ended_at"] = utc_now()
        session["status"] = status
        session.update(extra)
        self.data["ended_at"] = session["ended_at"]
        self.save()
