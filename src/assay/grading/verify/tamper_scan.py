"""The tamper scan: evidence, not a verdict.

The candidate's added and changed source is read for the handful of moves that code with no
business in the test machinery makes when it bends a test run: reaching into pytest's private
modules or hooks outside test files, ending the process without unwinding, rewriting
``sys.modules`` or ``builtins``, installing a tracer or profiler, inspecting callers' frames,
registering exit handlers. A legitimate fix can do some of these (an ``atexit`` in a CLI), so a
finding never rejects by itself; it is listed in the grade under ``details.suspicious`` with file
and line, for a reviewer, and the canaries decide.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from assay.grading.verify.canaries import is_test_file
from assay.grading.verify.integrity import ChangeSet

_MAX_BYTES = 1 << 20
_RULES: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    # (what, pattern, only outside test files)
    ("test runner internals", re.compile(r"\b_pytest\b|\bpluggy\b"), True),
    ("test runner hook", re.compile(r"\bpytest_(runtest|collection|collect|make|report|"
                                    r"terminal|sessionfinish|sessionstart|configure|"
                                    r"pyfunc|itemcollected|assertrepr)\w*"), True),
    ("hard process exit", re.compile(r"\bos\s*\.\s*_exit\b|\b_exit\s*\("), False),
    ("rewrites sys.modules", re.compile(r"\bsys\s*\.\s*modules\s*(\[[^\]]*\]\s*=(?!=)|"
                                        r"\.\s*(update|setdefault|pop)\b)"), False),
    ("touches builtins", re.compile(r"\bimport\s+builtins\b|\bbuiltins\s*\.\s*\w+\s*=(?!=)|"
                                    r"__builtins__"), False),
    ("tracer or profiler", re.compile(r"\bsys\s*\.\s*(settrace|setprofile)\b|"
                                      r"\bthreading\s*\.\s*(settrace|setprofile)\b"), False),
    ("inspects caller frames", re.compile(r"\bsys\s*\.\s*_getframe\b|\binspect\s*\.\s*"
                                          r"(currentframe|stack|getouterframes)\b|"
                                          r"\bf_back\b"), False),
    ("exit handler", re.compile(r"\batexit\b"), False),
    ("writes to inherited descriptors", re.compile(r"/proc/self/fd|\bos\s*\.\s*write\s*\("),
     False),
)


def scan_source(path: str, text: str) -> list[dict[str, Any]]:
    """Findings in one file: ``{"file", "line", "what", "text"}``."""
    in_test = is_test_file(path) or Path(path).name == "conftest.py"
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        for what, pattern, outside_tests_only in _RULES:
            if outside_tests_only and in_test:
                continue
            if pattern.search(line):
                found.append({"file": path, "line": n, "what": what, "text": stripped[:160]})
    return found


def scan_workspace(root: Path, changes: ChangeSet) -> list[dict[str, Any]]:
    """Scan the Python files the candidate added or changed, as rebuilt for the verifier."""
    findings: list[dict[str, Any]] = []
    for rel in sorted(changes.added + changes.modified):
        if not rel.endswith((".py", ".pth")):
            continue
        p = root / rel
        if p.is_symlink() or not p.is_file():
            continue
        try:
            text = p.read_bytes()[:_MAX_BYTES].decode("utf-8", errors="replace")
        except OSError:
            continue
        findings += scan_source(rel, text)
    return findings[:200]
