"""Shared fixtures: real suites on disk, a real scripted HTTP server, and the real CLI."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.scripted_server import ScriptedServer  # noqa: E402
from typer.testing import CliRunner

# The verifier caches the test ids it learns from trusted trees; keep the tests' own cache out
# of the user's home, and shared within one test session.
os.environ.setdefault("ASSAY_CACHE_DIR", tempfile.mkdtemp(prefix="assay-test-cache-"))

SYSTEM_PROMPT = 'Classify the issue. Reply only {"label": "bug|feature|question"}.'
SECRET = "sk-test-SECRET-do-not-record-0123456789"


def write_suite(root: Path, cases: Sequence[tuple[str, str, str]], *,
                labels: Sequence[str] | None = ("bug", "feature", "question"),
                prompt: str = SYSTEM_PROMPT, extra_yaml: str = "") -> Path:
    """A suite directory from (id, input, expected) triples."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(exist_ok=True)
    with open(root / "data" / "cases.jsonl", "w", encoding="utf-8") as fh:
        for cid, text, expected in cases:
            fh.write(json.dumps({"id": cid, "input": text, "expected": expected}) + "\n")
    (root / "prompts" / "system.txt").write_text(prompt, encoding="utf-8")
    yaml_lines = []
    if labels is not None:
        yaml_lines.append("labels: [" + ", ".join(labels) + "]")
    if extra_yaml:
        yaml_lines.append(extra_yaml)
    if yaml_lines:
        (root / "suite.yaml").write_text("\n".join(yaml_lines) + "\n")
    return root


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(args: Sequence[str], env: dict[str, str] | None = None) -> CliResult:
    """The real CLI in-process (fast); subprocess tests cover signals and kill -9."""
    from assay.cli import app

    runner = CliRunner()
    result = runner.invoke(app, list(args), env=env, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def endpoint_env(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"MODEL_BASE_URL": server.base_url, "MODEL_NAME": "test-model",
           "MODEL_API_KEY": SECRET}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in
            (run_dir / "raw_predictions.jsonl").read_text().splitlines() if line.strip()]


def assert_no_secret(path: Path) -> None:
    """The API key must not reach any file the run wrote."""
    for p in path.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), f"secret found in {p}"


os.environ.setdefault("NO_COLOR", "1")
