"""Tiny real agent task bundles written into a temporary directory.

The fixture task: ``calc.add`` subtracts instead of adding (the bug), ``calc.mul`` is right. The
hidden tests (``tests/test_fix.py``) need the fix; the workspace's own tests
(``repo/tests/test_calc.py``) only check ``mul`` and pass before and after it, so they are the
regression check. ``solution/solve.patch`` is the fix, ``solution/partial.patch`` special-cases
the one input of the first hidden test and fails the other two.

Every file that a sandboxed program must never see carries :data:`HIDDEN_MARKER` (tests,
solution, task.yaml), so a test can grep whatever an agent managed to collect for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from assay.suites.bundle import tree_digest

HIDDEN_MARKER = "ASSAY-HIDDEN-7f3c2a91"

BUGGY_SOURCE = '''\
"""A tiny calculator."""


def add(a, b):
    return a - b


def mul(a, b):
    return a * b
'''

FIXED_SOURCE = BUGGY_SOURCE.replace("return a - b", "return a + b")

REGRESSION_TESTS = '''\
from calc import mul


def test_mul():
    assert mul(2, 3) == 6


def test_mul_zero():
    assert mul(0, 9) == 0
'''

HIDDEN_TESTS = f'''\
# {HIDDEN_MARKER}
from calc import add


def test_add_small():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-1, -1) == -2


def test_add_zero():
    assert add(0, 7) == 7
'''

# Hidden tests that the buggy tree already passes: a task that tests nothing.
HIDDEN_TESTS_ALREADY_PASSING = f'''\
# {HIDDEN_MARKER}
from calc import mul


def test_mul_again():
    assert mul(3, 3) == 9
'''

def _patch(new_line: str) -> str:
    """A ``git apply``-able a/ b/ diff that replaces the body of ``add`` with ``new_line``."""
    context = ["", "", "def add(a, b):"]
    after = ["", "", "def mul(a, b):"]
    return "\n".join([
        f"# {HIDDEN_MARKER}",
        "diff --git a/src/calc/__init__.py b/src/calc/__init__.py",
        "--- a/src/calc/__init__.py",
        "+++ b/src/calc/__init__.py",
        "@@ -2,7 +2,7 @@",
        *(" " + c for c in context),
        "-    return a - b",
        f"+    {new_line}",
        *(" " + c for c in after),
    ]) + "\n"


SOLVE_PATCH = _patch("return a + b")
PARTIAL_PATCH = _patch("return 5 if (a, b) == (2, 3) else a - b")
# Applies cleanly but "fixes" the wrong thing: the oracle built from it is never accepted.
WRONG_PATCH = _patch("return a * b")

INSTRUCTION = """\
# Fix `calc.add`

`calc.add(a, b)` should return the sum of `a` and `b`, but it does not. Fix it in `src/calc/`.
Do not change the tests.
"""

BEHAVIOR_CMD = ("PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider "
                "$ASSAY_TESTS/test_fix.py")
REGRESSION_CMD = "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests"


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def task_yaml(*, task_id: str, allowed: bool, verifier_seconds: float, agent_seconds: float,
              behavior_cmd: str, regression_cmd: str, digest: str | None,
              requires: Sequence[str], verifier_revision: str, split: str,
              inline_digest_comment: bool = False) -> str:
    pin_note = "# pinned by assay task lint --write-digest"
    lines = [
        f"# fixture bundle for assay's own tests ({HIDDEN_MARKER})",
        f"id: {task_id}",
        "revision: 1",
        "family: arith",
        f"split: {split}",
        "instruction: instruction.md",
        "initial_state:",
        "  repository: repo",
        "  repository_commit: null",
        *([] if inline_digest_comment else [f"  {pin_note}"]),
        f"  fixture_digest: {digest or 'null'}" + (f"  {pin_note}" if inline_digest_comment
                                                  else ""),
        "  network_policy: none",
        f"  environment: {{requires: [{', '.join(requires)}]}}",
        "resources: {cpu_cores: 1, memory_limit_mib: 512, pids: 64}",
        "budget:",
        f"  agent_wall_seconds: {agent_seconds}",
        "  assistant_steps: 10",
        f"  verifier_wall_seconds: {verifier_seconds}",
        "acceptance:",
        f"  verifier_revision: {verifier_revision}",
        "  required: [behavior, regression, integrity]",
        f"  behavior: {{command: {_yaml_str(behavior_cmd)}}}",
        f"  regression: {{command: {_yaml_str(regression_cmd)}}}",
        '  protected_paths: ["tests/**"]',
    ]
    if allowed:
        lines.append('  allowed_paths: ["src/**"]')
    return "\n".join(lines) + "\n"


def make_bundle(root: Path, *, task_id: str = "calc-001", allowed: bool = True,
                verifier_seconds: float = 30, agent_seconds: float = 30,
                behavior_cmd: str | None = None, regression_cmd: str | None = None,
                pin_digest: bool = True, solve_patch: str = SOLVE_PATCH,
                hidden_tests: str = HIDDEN_TESTS, requires: Sequence[str] = ("python3", "pytest"),
                verifier_revision: str = "v1", split: str = "dev",
                inline_digest_comment: bool = False) -> Path:
    """Write the fixture bundle at ``root`` (created; must not exist yet) and return it."""
    root.mkdir(parents=True)
    pkg = root / "repo" / "src" / "calc"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(BUGGY_SOURCE)
    (root / "repo" / "tests").mkdir()
    (root / "repo" / "tests" / "test_calc.py").write_text(REGRESSION_TESTS)
    (root / "tests").mkdir()
    (root / "tests" / "test_fix.py").write_text(hidden_tests)
    (root / "solution").mkdir()
    (root / "solution" / "solve.patch").write_text(solve_patch)
    (root / "solution" / "partial.patch").write_text(PARTIAL_PATCH)
    (root / "instruction.md").write_text(INSTRUCTION)
    digest = tree_digest(root / "repo") if pin_digest else None
    (root / "task.yaml").write_text(task_yaml(
        task_id=task_id, allowed=allowed, verifier_seconds=verifier_seconds,
        agent_seconds=agent_seconds, behavior_cmd=behavior_cmd or BEHAVIOR_CMD,
        regression_cmd=regression_cmd or REGRESSION_CMD, digest=digest, requires=requires,
        verifier_revision=verifier_revision, split=split,
        inline_digest_comment=inline_digest_comment))
    return root
