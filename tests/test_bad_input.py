"""No command shows a traceback for bad input: every subcommand, fed a malformed file through
the real console entry point (a subprocess, as a user runs it), exits 2 with a message that
names the file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def _suite(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "prompts" / "system.txt").write_text("Reply {\"label\": \"x\"}")
    (root / "data" / "cases.jsonl").write_text('{"id": "a", "input": "x", "expected": "y"}\n'
                                              '{"id": "b", "input": \n')
    return root / "data" / "cases.jsonl"


def _bundle(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "task.yaml").write_text("id: [unclosed\nrevision: 1\n")
    return root / "task.yaml"


def _run_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "manifest.json").write_text('{"kind": "narrow", ')
    return root / "manifest.json"


def _trial_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "trial.json").write_text("{not json")
    return root / "trial.json"


def _tasks(root: Path) -> Path:
    root.mkdir(parents=True)
    p = root / "tasks.jsonl"
    p.write_text('{"id": "py-1", "type": "unit", "prompt": "x", "tests": "assert 1"}\n{oops\n')
    return p


CASES: dict[str, Callable[[Path], tuple[list[str], Path]]] = {
    "run": lambda t: (["run", str(t / "s"), "--model", "builtin/oracle"], _suite(t / "s")),
    "report": lambda t: (["report", str(t / "r")], _run_dir(t / "r")),
    "compare": lambda t: (["compare", str(t / "r"), str(t / "r")], _run_dir(t / "r")),
    "serve": lambda t: (["serve", "builtin/baseline", "--suite", str(t / "s"), "--port", "0"],
                        _suite(t / "s")),
    "suite check": lambda t: (["suite", "check", str(t / "c" / "tasks.jsonl")], _tasks(t / "c")),
    "grade": lambda t: (["grade", str(t / "r"), "--export", str(t / "out.csv")],
                        _run_dir(t / "r")),
    "task lint": lambda t: (["task", "lint", str(t / "b")], _bundle(t / "b")),
    "task check": lambda t: (["task", "check", str(t / "b"), "--out", str(t / "o")],
                             _bundle(t / "b")),
    "trial run": lambda t: (["trial", "run", str(t / "b"), "--agent", "nop", "--out",
                             str(t / "o")], _bundle(t / "b")),
    "regrade": lambda t: (["regrade", str(t / "tr"), "--verifier-revision", "v9"],
                          _trial_dir(t / "tr")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_subcommand_refuses_malformed_input_without_a_traceback(
        name: str, tmp_path: Path) -> None:
    args, bad_file = CASES[name](tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_")}
    res = subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True,
                         text=True, timeout=120, env={**env, "NO_COLOR": "1"},
                         stdin=subprocess.DEVNULL, check=False)
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    assert res.returncode == 2, out
    squashed = "".join(res.stderr.split())
    assert "".join(str(bad_file).split()) in squashed, res.stderr
