"""Shared fixtures: real suites on disk, a real scripted HTTP server, and the real CLI."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.scripted_server import ScriptedServer  # noqa: E402
from typer.testing import CliRunner

# Cache compiled modules (this checkout's ``__pycache__`` folders, git-ignored) even where the
# environment sets PYTHONDONTWRITEBYTECODE, as this machine's does: otherwise each of eight
# workers rewrites the 150 test modules (about 7 CPU-seconds each) and every ``python -m assay``
# a test starts compiles assay's 290 modules again (0.9 CPU-seconds where 0.5 would do). Only
# this process writes: the subprocesses keep the environment's setting, so a task's or an
# example's folder never gains a cache; they read the cache written here.
sys.dont_write_bytecode = False

# The verifier caches the test ids it learns from trusted trees; keep the tests' own cache out
# of the user's home, and shared within one test session. It goes with the process (74 runs'
# worth once filled /tmp with 2.9 GB), all but its image store: that is the kept store of the
# shared test images (tests/support/images.py), so an image a test builds through assay (a
# converted Harbor task's recipe) is built once for as long as the builder does not change.
if "ASSAY_CACHE_DIR" not in os.environ:
    os.environ["ASSAY_CACHE_DIR"] = tempfile.mkdtemp(prefix="assay-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ASSAY_CACHE_DIR"], ignore_errors=True)
    from support.images import session_image_store

    if (kept := session_image_store()) is not None:
        kept.mkdir(parents=True, exist_ok=True)
        os.symlink(kept, Path(os.environ["ASSAY_CACHE_DIR"]) / "environments")

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


@functools.cache
def _cli_command() -> Any:
    """The click command typer makes of assay's app, made once a process: typer reads every
    command's signature again each time it is asked (40-70 ms of evaluating annotations, in
    each of the suite's several hundred in-process runs)."""
    from typer.main import get_command

    from assay.cli import app

    return get_command(app)


class _CliRunner(CliRunner):
    """typer's test runner, handed the command made once instead of the app."""

    def invoke(self, app: Any, *args: Any, **kwargs: Any) -> Any:
        import typer.testing

        made = typer.testing._get_command
        typer.testing._get_command = lambda _app: _cli_command()  # type: ignore[assignment]
        try:
            return super().invoke(app, *args, **kwargs)
        finally:
            typer.testing._get_command = made


def run_cli(args: Sequence[str], env: dict[str, str] | None = None) -> CliResult:
    """The real CLI in-process (fast); subprocess tests cover signals and kill -9."""
    from assay.cli import app

    result = _CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's shared test images (tests/support/images.py) go with the session; the
    pytest-xdist workers leave them to the controller. A process that counted its CPU in a
    cgroup of its own (``ASSAY_TEST_CPU_LOG``) leaves it."""
    if os.environ.get("ASSAY_TEST_CPU_LOG"):
        from support import cpu_meter

        cpu_meter.leave()
    if not hasattr(config, "workerinput"):
        from support.images import remove_session_store

        remove_session_store()


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
# An xdist worker starts with COLUMNS=80 in its environment, which a serial run does not have,
# and its temporary paths are longer (…/popen-gwN/…): the CLI would wrap its one-line messages
# (at 80 columns, or at 120 without COLUMNS: cli/app.py) elsewhere than in a serial run, and the
# tests that look for a phrase in a message naming a temporary path would see it cut by a line
# break. Wide enough for any of those paths.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["COLUMNS"] = "200"
    os.environ.pop("LINES", None)

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the longest units start first (tests/support/schedule.py: a unit is a file,
    or a single test of a file whose tests share no costly fixture), by the seconds measured in
    tests/durations.json, so the short ones fill the workers around them instead of a long one
    starting last. A serial run keeps the collected order (moving a test out of its module
    would set the module's fixtures up twice)."""
    # only in an xdist worker (the controller collects nothing): ``numprocesses`` is not set
    # there, so an earlier check on it never sorted anything
    if hasattr(config, "workerinput"):
        from support.schedule import load_durations, scope_of, unit_seconds

        seconds = unit_seconds((item.nodeid for item in items), load_durations())
        items.sort(key=lambda item: -seconds[scope_of(item.nodeid)])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the units and order of tests/support/schedule.py."""
    if getattr(config.option, "dist", None) != "loadfile":
        return None
    from support.schedule import MeasuredScheduling

    return MeasuredScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``ASSAY_TEST_CPU_LOG=FILE``: one JSON line a test with the CPU seconds it cost and
    how they were counted (``support/cpu_meter.py``: a cgroup of this worker's where the machine
    allows it, every process started from here; else the children it waited for), the 512-byte
    blocks written, and its wall seconds, for placing tests by measurement (tests/README.md)."""
    log = os.environ.get("ASSAY_TEST_CPU_LOG")
    if not log:
        return (yield)
    import time

    from support import cpu_meter

    cpu0, out0 = cpu_meter.cpu_seconds(), cpu_meter.blocks_written()
    wall0, started = time.monotonic(), time.time()
    try:
        return (yield)
    finally:
        row = {"test": item.nodeid, "cpu": round(cpu_meter.cpu_seconds() - cpu0, 2),
               "counted_by": cpu_meter.method(),
               "blocks_out": cpu_meter.blocks_written() - out0,
               "wall": round(time.monotonic() - wall0, 2), "started": round(started, 2),
               "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
