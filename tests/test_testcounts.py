"""Counts read from a test runner's printed summary (``grading/verify/testcounts.py``): unittest's,
from real ``python3 -m unittest`` runs, and what no runner printed (a candidate's own ``print``s
near a summary do not make one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assay.grading.verify.testcounts import counts_say_pass, parse_counts

CASES = {
    "pass": "def test_a(self):\n        self.assertEqual(1, 1)\n"
            "    def test_b(self):\n        self.assertTrue(True)\n",
    "fail": "def test_a(self):\n        self.assertEqual(1, 2)\n"
            "    def test_b(self):\n        self.assertTrue(True)\n",
    "error": "def test_a(self):\n        raise KeyError('x')\n"
             "    def test_b(self):\n        pass\n",
    "skip": "@unittest.skip('later')\n    def test_a(self):\n        pass\n"
            "    def test_b(self):\n        pass\n",
    "xfail": "@unittest.expectedFailure\n    def test_a(self):\n        self.fail()\n"
             "    @unittest.expectedFailure\n    def test_b(self):\n        pass\n",
}


def _unittest_output(tmp_path: Path, body: str) -> str:
    (tmp_path / "test_x.py").write_text(
        f"import unittest\n\n\nclass T(unittest.TestCase):\n    {body}")
    res = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    return res.stdout + "\n" + res.stderr


@pytest.mark.parametrize(("case", "passed", "failed", "errors", "says"), [
    ("pass", 2, 0, 0, True),
    ("fail", 1, 1, 0, False),
    ("error", 1, 0, 1, False),
    ("skip", 1, 0, 0, True),
    ("xfail", 0, 1, 0, False),  # one expected failure, one unexpected success
])
def test_unittest_summaries_of_real_runs(tmp_path: Path, case: str, passed: int, failed: int,
                                         errors: int, says: bool) -> None:
    counts = parse_counts(_unittest_output(tmp_path, CASES[case]))
    assert counts is not None and counts["runner"] == "unittest" and counts["tests"] == 2
    assert (counts["passed"], counts["failed"], counts["errors"]) == (passed, failed, errors)
    assert counts_say_pass(counts) is says


def test_no_test_ran_is_no_pass(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("import unittest\n")
    res = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    counts = parse_counts(res.stdout + res.stderr)
    # Python 3.12+ prints "NO TESTS RAN" (exit 5); older ones "Ran 0 tests ... OK"
    assert counts is None or counts_say_pass(counts) is False


def test_a_line_that_is_not_a_summary_counts_nothing() -> None:
    assert parse_counts("Ran 3 tests in 0.1s\nOK\n") is None  # unittest prints a blank line
    assert parse_counts("I Ran 3 tests in 0.1s\n\nOK\n") is None
    assert parse_counts("Ran 3 tests in 0.1s\n\nOK, sure\n") is None
    # a FAILED line without figures assay knows is not read as a pass
    odd = parse_counts("Ran 2 tests in 0.1s\n\nFAILED (weird=1)\n")
    assert odd is not None and counts_say_pass(odd) is False
