"""What a judge reads of an agent trial: the frozen artifact and the recorded trajectory, only.

The live workspace is gone by the time anything is judged (the trial deletes it after the
freeze), so the tree a judge reads is rebuilt the way the verifier rebuilds it: the pristine
starting tree plus the changes carried in ``artifact.tar``. The trajectory is what the adapter
recorded in the attempt's ``agent/`` folder: mini-swe-agent's ``trajectory.json`` when there is
one, else the agent's ``stdout.log`` (one event per JSON line, or per block of plain lines).

Parts, chosen by name (``show``):
- ``diff``: one file, ``changes.diff``, the unified diff of every changed text file against the
  starting tree (citations ``changes.diff:LINE``);
- ``files``: every added or modified text file in full, under its own path (``path:LINE``);
- ``trajectory``: the recorded events (``event:N``);
- ``answer``: the agent's final message (``answer.txt:LINE``), when the record has one.

Everything is capped (bytes per file, events, bytes per event) and a cap that cut something says
so inside the material, so a judge never reads a truncated file as the whole of it.
Identifying text (arm names, model names, run directories) is scrubbed by the caller with
:func:`scrub`, paths included.
"""

from __future__ import annotations

import difflib
import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.environments.seed import seed_from_image
from assay.grading.judge.reply import Material, MaterialKind
from assay.records.artifact import ARTIFACT_JSON, list_tree
from assay.records.io import read_json_file
from assay.suites.bundle import Bundle

PARTS = ("diff", "files", "trajectory", "answer")
DEFAULT_SHOW = ("diff", "trajectory")
DIFF_FILE = "changes.diff"
ANSWER_FILE = "answer.txt"
MAX_FILE_BYTES = 64_000
MAX_DIFF_BYTES = 200_000
MAX_EVENTS = 200
MAX_EVENT_CHARS = 2_000
REDACTED = "[redacted]"


@dataclass
class Parts:
    """The pieces of a Material before the judge module's type is built from them (kept apart
    so the extraction can be read and tested on its own)."""

    files: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _text(data: bytes) -> str | None:
    """The bytes as text, or None for what a judge cannot read (binary, not UTF-8)."""
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _cap(text: str, limit: int, what: str) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    cut = raw[:limit].decode("utf-8", errors="ignore")
    return cut + f"\n[assay: {what} cut at {limit} bytes of {len(raw)}]\n"


def tree_changes(pristine: Path, tree: Path) -> tuple[list[str], list[str], list[str]]:
    """(added, modified, deleted) files between two trees, by content digest and type."""
    before = {e["path"]: e for e in list_tree(pristine) if e["type"] != "dir"}
    after = {e["path"]: e for e in list_tree(tree) if e["type"] != "dir"}
    added = sorted(set(after) - set(before))
    deleted = sorted(set(before) - set(after))
    modified = sorted(p for p in set(before) & set(after)
                      if (before[p]["type"], before[p].get("sha256"), before[p].get("target"))
                      != (after[p]["type"], after[p].get("sha256"), after[p].get("target")))
    return added, modified, deleted


def _read(root: Path, rel: str) -> str | None:
    p = root / rel
    if p.is_symlink():
        return f"[symlink -> {p.readlink()}]"
    if not p.is_file():
        return None
    return _text(p.read_bytes())


def artifact_parts(pristine: Path, tree: Path, show: Iterable[str]) -> Parts:
    """``diff`` and ``files`` of the rebuilt ``tree`` against ``pristine``."""
    show = set(show)
    parts = Parts()
    added, modified, deleted = tree_changes(pristine, tree)
    if "diff" in show:
        chunks: list[str] = []
        for rel in sorted(added + modified + deleted):
            old = _read(pristine, rel) if rel not in added else ""
            new = _read(tree, rel) if rel not in deleted else ""
            if old is None or new is None:
                how = "added" if rel in added else "deleted" if rel in deleted else "changed"
                chunks.append(f"Binary or unreadable file {rel} {how}\n")
                continue
            lines = difflib.unified_diff(old.splitlines(keepends=True),
                                         new.splitlines(keepends=True),
                                         "/dev/null" if rel in added else f"a/{rel}",
                                         "/dev/null" if rel in deleted else f"b/{rel}")
            chunks.append("".join(x if x.endswith("\n") else x + "\n\\ No newline at end "
                                  "of file\n" for x in lines))
        text = "".join(chunks) or "(no change to the starting tree)\n"
        parts.files[DIFF_FILE] = _cap(text, MAX_DIFF_BYTES, "the diff")
    if "files" in show:
        for rel in added + modified:
            content = _read(tree, rel)
            if content is None:
                parts.notes.append(f"{rel}: binary or not UTF-8, not shown")
                continue
            parts.files[rel] = _cap(content, MAX_FILE_BYTES, "this file")
    return parts


def rebuilt_tree(bundle: Bundle, trial_dir: Path, dest: Path, *,
                 expect_digest: str | None = None) -> Path:
    """The pristine tree at ``dest/pristine`` and the candidate's frozen tree at
    ``dest/candidate``, built the verifier's way (never from a live workspace). Returns the
    candidate's path. ``expect_digest``: the starting tree the trial had; a bundle whose tree
    changed since would rebuild a tree the agent never saw (GradingError)."""
    from assay.errors import GradingError
    from assay.grading.verify.integrity import check_integrity
    from assay.grading.verify.rebuild import build_workspace
    from assay.suites.bundle import tree_digest

    pristine = dest / "pristine"
    bundle.export_starting_tree(pristine)
    if expect_digest is not None and tree_digest(pristine) != expect_digest:
        raise GradingError(f"{trial_dir}: the starting tree of {bundle.root} is not the one the "
                           f"trial started from ({expect_digest}): the artifact cannot be "
                           "rebuilt")
    seed_from_image(bundle, pristine)  # as the agent's workspace started
    frozen = read_json_file(trial_dir / ARTIFACT_JSON)
    acc = bundle.spec.acceptance
    integrity = check_integrity(list_tree(pristine), frozen["entries"],
                                protected=acc.protected_paths, allowed=acc.allowed_paths,
                                allowed_binaries=acc.allowed_binaries,
                                ignored=frozen.get("excluded", {}).get("patterns",
                                                                       bundle.ignored_paths))
    candidate = dest / "candidate"
    build_workspace(pristine, trial_dir, integrity, candidate)
    return candidate


def _event_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def trajectory_events(trial_dir: Path) -> tuple[list[str], list[str]]:
    """The recorded events of the attempt in ``trial_dir``, oldest first, and notes on what
    was cut. mini's trajectory.json gives one event per message; a JSON stream on stdout one per
    line; plain stdout one per block of up to 20 lines."""
    agent = trial_dir / "agent"
    events: list[str] = []
    traj = agent / "trajectory.json"
    if traj.is_file():
        try:
            data = json.loads(traj.read_bytes())
            messages = data.get("messages") if isinstance(data, dict) else None
        except ValueError:
            messages = None
        if isinstance(messages, list):
            for m in messages:
                if isinstance(m, dict):
                    content = m.get("content")
                    if not isinstance(content, str):
                        content = _event_text(content)
                    events.append(f"{m.get('role', '?')}: {content}")
    stdout = agent / "stdout.log"
    if not events and stdout.is_file():
        text = stdout.read_bytes()[: 8 << 20].decode("utf-8", errors="replace")
        block: list[str] = []
        for line in text.splitlines():
            obj: Any = None
            if line.lstrip().startswith("{"):
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
            if isinstance(obj, dict):
                if block:
                    events.append("\n".join(block))
                    block = []
                events.append(_event_text(obj))
            else:
                block.append(line)
                if len(block) >= 20:
                    events.append("\n".join(block))
                    block = []
        if block:
            events.append("\n".join(block))
    notes: list[str] = []
    if len(events) > MAX_EVENTS:
        notes.append(f"trajectory: the first {len(events) - MAX_EVENTS} of {len(events)} "
                     "events left out (the last ones kept)")
        events = [f"[assay: {len(events) - MAX_EVENTS} earlier events left out]",
                  *events[-MAX_EVENTS:]]
    return [_cap_chars(e) for e in events], notes


def _cap_chars(text: str) -> str:
    if len(text) <= MAX_EVENT_CHARS:
        return text
    return text[:MAX_EVENT_CHARS] + f" [assay: event cut at {MAX_EVENT_CHARS} characters]"


_ANSWER_KEYS = ("result", "text", "content", "message")


def final_answer(trial_dir: Path) -> str | None:
    """The agent's last message, as the record has it: mini's last assistant message, else the
    last JSON event's ``result``/``text``/``content``/``message`` string, else the last 40 lines
    of stdout; None when nothing was recorded."""
    agent = trial_dir / "agent"
    traj = agent / "trajectory.json"
    if traj.is_file():
        try:
            messages = json.loads(traj.read_bytes()).get("messages") or []
        except (ValueError, AttributeError):
            messages = []
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "assistant" \
                    and isinstance(m.get("content"), str):
                return m["content"]
    stdout = agent / "stdout.log"
    if not stdout.is_file():
        return None
    lines = stdout.read_bytes()[-(1 << 20):].decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            for key in _ANSWER_KEYS:
                if isinstance(obj.get(key), str) and obj[key].strip():
                    return obj[key]
    tail = "\n".join(lines[-40:]).strip()
    return tail or None


def trial_parts(bundle: Bundle, trial_dir: Path, show: Iterable[str], *,
                tree: Path | None = None, pristine: Path | None = None,
                expect_digest: str | None = None) -> Parts:
    """Every part asked for of the attempt in ``trial_dir``. ``tree``/``pristine``: an already
    rebuilt tree (the verifier has one); else one is rebuilt in a temporary directory (checked
    against ``expect_digest`` when given)."""
    show = tuple(show)
    unknown = [s for s in show if s not in PARTS]
    if unknown:
        raise ValueError(f"unknown material parts {unknown}: choose from {PARTS}")
    parts = Parts()
    if {"diff", "files"} & set(show):
        if tree is None or pristine is None:
            with tempfile.TemporaryDirectory(prefix="assay-judge-") as tmp:
                cand = rebuilt_tree(bundle, trial_dir, Path(tmp), expect_digest=expect_digest)
                parts = artifact_parts(Path(tmp) / "pristine", cand, show)
        else:
            parts = artifact_parts(pristine, tree, show)
    if "trajectory" in show:
        parts.events, notes = trajectory_events(trial_dir)
        parts.notes += notes
    if "answer" in show:
        answer = final_answer(trial_dir)
        if answer is None:
            parts.notes.append("answer: the record holds no final message")
        else:
            parts.files[ANSWER_FILE] = _cap(answer, MAX_FILE_BYTES, "the answer")
    return parts


def _name_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    words = sorted({n for n in names if n and len(n) >= 3}, key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(re.escape(w) for w in words)
                      + r")(?![A-Za-z0-9_])", re.IGNORECASE)


def scrub_text(text: str, names: Iterable[str]) -> tuple[str, int]:
    """``text`` with every name replaced (see :func:`scrub`), and how many were."""
    pattern = _name_pattern(names)
    return (text, 0) if pattern is None else pattern.subn(REDACTED, text)


def scrub(parts: Parts, names: Iterable[str]) -> int:
    """Replace every occurrence of ``names`` (arm names, model names, run directories) in the
    parts' paths and texts with ``[redacted]``, in place; returns how many were replaced.

    Whole words only, case-insensitive, longest first (a run directory before the arm name
    inside it); names shorter than three characters are left alone, because scrubbing ``a``
    would scrub the material itself."""
    pattern = _name_pattern(names)
    if pattern is None:
        return 0
    count = 0

    def sub(text: str) -> str:
        nonlocal count
        new, n = pattern.subn(REDACTED, text)
        count += n
        return new

    parts.files = {sub(k): sub(v) for k, v in parts.files.items()}
    parts.events = [sub(e) for e in parts.events]
    parts.notes = [sub(n) for n in parts.notes]
    return count


def to_material(parts: Parts, *, kind: MaterialKind = "artifact",
                context: str | None = None) -> Material:
    """The judge module's ``Material`` of these parts (notes on what was cut become a file of
    their own, ``assay-notes.txt``, so the judge reads them as part of the material)."""
    files = dict(parts.files)
    if parts.notes:
        files["assay-notes.txt"] = "\n".join(parts.notes) + "\n"
    return Material(kind=kind, files=files, events=tuple(parts.events), context=context)
