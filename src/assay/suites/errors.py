"""Input errors that point at the exact place to fix: file, line and field.

The classes live in ``assay.errors`` (one tree for the whole package); suites import them from
here because this is where a suite author's problems are built.
"""

from __future__ import annotations

from assay.errors import Problem, SuiteError

__all__ = ["Problem", "SuiteError"]
