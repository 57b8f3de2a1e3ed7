"""Diff tasks: does the candidate's unified diff do what the golden one does?

Two ways to match, cheapest first: the texts are the same after normalising whitespace and
headers (timestamps, ``index`` lines, hunk trailers), or both diffs apply cleanly to the task's
files and leave byte-identical trees. A diff that does not apply is a recorded failure. Applying
runs ``git apply`` inside the sandbox, because a diff is untrusted data that names paths.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from assay.errors import SandboxFailed
from assay.grading.answers.unit import Isolation, Verdict
from assay.sandbox import SANDBOX_WORKDIR, Limits, run_sandboxed
from assay.suites.coding import CodingTask

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@.*$")
PATCH_NAME = ".assay-candidate.patch"


def normalize_diff(text: str) -> list[str]:
    """The lines that carry meaning: file names, hunk ranges and the +/-/context lines."""
    out: list[str] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.startswith(("diff --git", "index ", "similarity index", "\\ No newline")):
            continue
        if line.startswith(("--- ", "+++ ")):
            line = line.split("\t", 1)[0]
        m = _HUNK.match(line)
        if m:
            a, b, c, d = m.groups()
            line = f"@@ -{a},{b or 1} +{c},{d or 1} @@"
        out.append(line)
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out


def _snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every path under root with its type and content; links are compared by target and never
    followed, since a diff may create one that points anywhere."""
    snap: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if rel == PATCH_NAME:
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p).encode())
            elif stat.S_ISREG(st.st_mode):
                kind = "exec" if st.st_mode & 0o111 else "file"
                snap[rel] = (kind, p.read_bytes())
    return snap


#: how ``git apply`` reads a diff: as written first, then by its lines alone.
STRICT_APPLY = ("--whitespace=nowarn",)
LENIENT_APPLY = ("--whitespace=nowarn", "--recount", "--unidiff-zero")


def apply_diff(files: dict[str, str], diff: str, *, limits: Limits,
               isolation: Isolation) -> tuple[dict[str, tuple[str, bytes]] | None, str]:
    """Apply ``diff`` to a fresh copy of ``files``; the resulting tree and how it applied, or
    None and why not.

    Lenient about form, strict about result: models write ``-U0`` hunks and get hunk counts
    wrong, so a diff that ``git apply`` refuses as written is tried once more read by its lines
    (``--recount --unidiff-zero``). That cannot turn a wrong answer right, because a pass still
    needs files identical to the golden result. The strict try comes first because recounting
    misreads a ``--- a/next-file`` header after a hunk as a removed line."""
    tree, why = _apply(files, diff, STRICT_APPLY, limits=limits, isolation=isolation)
    if tree is not None:
        return tree, "applied"
    lenient, _ = _apply(files, diff, LENIENT_APPLY, limits=limits, isolation=isolation)
    if lenient is not None:
        return lenient, "applied when read by its lines (--recount --unidiff-zero)"
    return None, why  # the strict try's message says what is wrong with the diff as written


def _apply(files: dict[str, str], diff: str, options: tuple[str, ...], *, limits: Limits,
           isolation: Isolation) -> tuple[dict[str, tuple[str, bytes]] | None, str]:
    with tempfile.TemporaryDirectory(prefix="assay-diff-") as tmp:
        work = Path(tmp)
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text, encoding="utf-8")
        (work / PATCH_NAME).write_text(diff if diff.endswith("\n") else diff + "\n",
                                       encoding="utf-8")
        cwd_patch = PATCH_NAME if isolation == "bwrap" else str(work / PATCH_NAME)
        argv = ["git", "apply", *options, cwd_patch]
        result = run_sandboxed(argv, work, limits=limits, isolation=isolation,
                               env={"GIT_CONFIG_NOSYSTEM": "1"})
        if result.reason == "sandbox_error":
            raise SandboxFailed(result.detail or "sandbox error")
        if result.reason != "ok":
            return None, (result.stderr_tail.strip().splitlines() or [result.reason])[-1][:300]
        return _snapshot(work), "applied"


def grade_diff(task: CodingTask, answer_diff: str, *, limits: Limits,
               isolation: Isolation = "bwrap") -> Verdict:
    golden = task.golden or ""
    if not answer_diff.strip():
        return Verdict(False, "empty", {})
    if normalize_diff(answer_diff) == normalize_diff(golden):
        return Verdict(True, "identical", {"match": "normalised text"})
    try:
        want, why_golden = apply_diff(task.files, golden, limits=limits, isolation=isolation)
        if want is None:
            return Verdict(None, "golden_does_not_apply", {"detail": why_golden},
                           infra_error=f"task {task.id}: golden diff does not apply: "
                           f"{why_golden}")
        got, why = apply_diff(task.files, answer_diff, limits=limits, isolation=isolation)
    except SandboxFailed as exc:
        return Verdict(None, "sandbox_error", {}, infra_error=str(exc))
    if got is None:
        return Verdict(False, "does_not_apply", {"detail": why})
    applied = {} if why == "applied" else {"applied": why}
    if got == want:
        return Verdict(True, "same_result", {"match": "identical files after applying", **applied})
    changed = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return Verdict(False, "different_result", {"differs": changed[:20], **applied})


__all__ = ["SANDBOX_WORKDIR", "apply_diff", "grade_diff", "normalize_diff"]
