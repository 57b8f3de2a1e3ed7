"""assay's pytest reporter, loaded into the verifier's test process (never imported by assay).

The verifier copies this file, read-only, into a Python user site that only the sandbox sees
(``PYTHONUSERBASE``) and enables it with ``PYTEST_PLUGINS``, so it loads whatever shell command
the task wrote, even one that sets its own ``PYTHONPATH``. It writes one JSON line per event to
the file named by ``ASSAY_VERIFIER_REPORT`` (a path drawn at random per run), opening and
closing the file for every line so that a process that dies half-way still leaves every line
before it, and so that no descriptor is left for the candidate's code to scribble on.

It runs beside the candidate's code, so it proves nothing alone: the verifier's canary tests
(one that must pass, one that must fail) are what show that this report was not bent. With
``ASSAY_VERIFIER_MODE=collect`` it records the collected test ids and then runs nothing: that is
how the verifier learns the expected ids from trusted code (the pristine tree and the reference
solution). Standard library and pytest only: the sandbox has no assay installed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

SCHEMA = "assay.pytest_report/1"


def _write(event: dict[str, Any]) -> None:
    path = os.environ.get("ASSAY_VERIFIER_REPORT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event, separators=(",", ":")) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    _write({"event": "start", "schema": SCHEMA, "pid": os.getpid(),
            "pytest": pytest.__version__, "mode": os.environ.get("ASSAY_VERIFIER_MODE", "run")})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        text = str(report.longrepr)
        _write({"event": "collect_error", "nodeid": report.nodeid, "detail": text[-800:]})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    _write({"event": "collected", "ids": [item.nodeid for item in items]})
    if os.environ.get("ASSAY_VERIFIER_MODE") == "collect":
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


def _message(report: pytest.TestReport) -> str | None:
    """The failure's own line (pytest's ``reprcrash``: ``assert 3 == 4``, ``KeyError: 'x'``),
    bounded: what a reader is shown as the reason a real test failed."""
    if not report.failed:
        return None
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None)
    if not isinstance(text, str):
        text = str(report.longrepr).strip().splitlines()[-1:] or [""]
        text = text[0]
    return text[:300]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    event = {"event": "test", "nodeid": report.nodeid, "when": report.when,
             "outcome": report.outcome, "xfail": bool(getattr(report, "wasxfail", False))}
    message = _message(report)
    if message is not None:
        event["message"] = message
    _write(event)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"event": "finish", "exitstatus": int(exitstatus),
            "testscollected": session.testscollected, "testsfailed": session.testsfailed})
