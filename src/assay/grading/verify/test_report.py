"""Reading assay's structured pytest report and deciding a tamper-evident check from it.

The verdict comes from structure, not from a summary line: every expected test id (from trusted
code) must be reported passed, and the canaries must say the runner can still fail (a random
must-fail canary reported failed; a derived copy not passing beside its passing original).
The printed summary stays in the record for a reader, and a disagreement between it and the
structured report is itself evidence of tampering. Pure functions over text and plain values,
so every rule is tested on hand-written reports.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from assay.grading.verify.canaries import Canary, id_in_file
from assay.records.statuses import TestsFailure

REPORT_SCHEMA = "assay.pytest_report/1"
_EVENTS = {"start", "collect_error", "collected", "test", "finish"}


@dataclass
class ParsedReport:
    """What the report file says, plus whatever in it the reporter cannot have written."""

    sessions: int = 0
    finished: int = 0
    exitstatus: list[int] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    collect_errors: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)
    #: a failed test's own failure line (``assert 3 == 4``), first phase that failed
    messages: dict[str, str] = field(default_factory=dict)
    foreign_lines: list[int] = field(default_factory=list)

    def outcome(self, nodeid: str) -> str | None:
        """pytest's own word for a test: passed, failed, error, skipped, xfailed, xpassed."""
        ph = self.phases.get(nodeid)
        if ph is None:
            return None
        for when in ("setup", "teardown"):
            if ph.get(when, ("", False))[0] == "failed":
                return "error"
        call = ph.get("call")
        if call is None:
            setup = ph.get("setup")
            if setup and setup[0] == "skipped":
                return "xfailed" if setup[1] else "skipped"
            return "error" if setup is None else "skipped"
        outcome, xfail = call
        if xfail:
            return "xpassed" if outcome == "passed" else "xfailed"
        return outcome


def parse_report(text: str | None) -> ParsedReport | None:
    """None when there is no report at all; otherwise every line read, and the numbers of the
    lines that are not events this reporter writes (torn, foreign or rewritten)."""
    if text is None or not text.strip():
        return None
    rep = ParsedReport()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            rep.foreign_lines.append(n)
            continue
        kind = ev.get("event") if isinstance(ev, dict) else None
        if kind not in _EVENTS:
            rep.foreign_lines.append(n)
            continue
        try:
            if kind == "start":
                if ev.get("schema") != REPORT_SCHEMA:
                    rep.foreign_lines.append(n)
                    continue
                rep.sessions += 1
            elif kind == "finish":
                rep.finished += 1
                rep.exitstatus.append(int(ev["exitstatus"]))
            elif kind == "collected":
                rep.collected += [str(i) for i in ev["ids"]]
            elif kind == "collect_error":
                rep.collect_errors.append({"nodeid": str(ev.get("nodeid")),
                                           "detail": str(ev.get("detail", ""))[-400:]})
            else:
                nodeid = str(ev["nodeid"])
                rep.phases.setdefault(nodeid, {})[str(ev["when"])] = (
                    str(ev["outcome"]), bool(ev.get("xfail")))
                if isinstance(ev.get("message"), str) and nodeid not in rep.messages:
                    rep.messages[nodeid] = ev["message"][:300]
        except (KeyError, TypeError, ValueError):
            rep.foreign_lines.append(n)
    return rep


_TAP_RESULT = re.compile(r"^(?P<indent> *)(?P<ok>not ok|ok) \d+(?: - (?P<name>.*?))?"
                         r"(?: # (?P<directive>SKIP|TODO)\b.*)?$", re.IGNORECASE)
_TAP_SUBTEST = re.compile(r"^(?P<indent> *)# Subtest: (?P<name>.*)$")
_TAP_YAML_TYPE = re.compile(r"^ *type: '?suite'?\s*$")


def _yaml_says_suite(lines: list[str], after: int) -> bool:
    """Whether the YAML block right after result line ``after`` (1-based) says
    ``type: 'suite'``; a result with no block directly under it is a test."""
    if after >= len(lines) or lines[after].strip() != "---":
        return False
    for line in lines[after + 1:]:
        if line.strip() == "...":
            return False
        if _TAP_YAML_TYPE.match(line):
            return True
    return False


def parse_tap(text: str | None) -> ParsedReport | None:
    """node's TAP reporter, read into the same shape: one "call" phase per test, ids the names
    of the enclosing suites and the test joined by `` > ``; suites themselves are not tests.
    A report without node's closing ``# tests N`` count never finished."""
    if text is None or not text.strip():
        return None
    rep = ParsedReport()
    lines = text.splitlines()
    if not lines[0].startswith("TAP version"):
        rep.foreign_lines.append(1)
    rep.sessions = 1
    stack: list[str] = []
    for n, line in enumerate(lines, start=1):
        sub = _TAP_SUBTEST.match(line)
        if sub:
            level = len(sub.group("indent")) // 4
            stack = stack[:level] + [sub.group("name")]
            continue
        res = _TAP_RESULT.match(line)
        if res:
            level = len(res.group("indent")) // 4
            name = res.group("name") or f"#{n}"
            nodeid = " > ".join([*stack[:level], name])
            is_suite = _yaml_says_suite(lines, n)
            if not is_suite:
                directive = (res.group("directive") or "").upper()
                outcome = ("skipped" if directive else
                           "passed" if res.group("ok") == "ok" else "failed")
                rep.phases[nodeid] = {"call": (outcome, False)}
                rep.collected.append(nodeid)
            stack = stack[:level]
            continue
        if line.startswith("# tests "):
            rep.finished = 1
    return rep


def last_name(nodeid: str) -> str:
    """The test's own name: after pytest's last ``::`` or node's last `` > ``."""
    return nodeid.rsplit("::", 1)[-1].rsplit(" > ", 1)[-1]


def _same_file(nodeid: str, planted_file: str) -> bool:
    return id_in_file(nodeid + "::x", planted_file)


class ReportVerdict(TypedDict, total=False):
    """The verdict of one tamper-evident check (:func:`check_verdict`), keys in the order the
    grade's ``tamper_evident`` record holds them. ``status``, ``tampered`` and ``problems``
    are always there; the rest once a structured report was read."""

    status: Literal["pass", "fail", "tampered"]
    tampered: list[str]  # evidence of a bent report: any of it rejects
    problems: list[str]  # honest failures: failed or missing tests, a canary that must pass
    canaries: list[dict[str, Any]]  # each planted canary with its outcome
    canary_counts: dict[str, int]  # by kind: random, derived
    counts: dict[str, Any]  # the structured report's counts, as testcounts' summary
    failed_ids: list[str]  # the task's real tests that failed, never a canary
    passed_ids: list[str]  # the task's real tests that passed (the first 50)
    first_failure: dict[str, str]  # the first real test that failed: id and failure line
    canary_summary: dict[str, int]  # planted, must fail / failed so, must pass / passed so
    missing_ids: list[str]  # expected on the trusted tree, never reported
    n_missing: int
    extra_ids: list[str]
    failure: TestsFailure  # with ``fail``: the exact reason, when it is one of these


def _judge_derived(c: Canary, rep: ParsedReport, find: Any,
                   out: ReportVerdict) -> list[dict[str, Any]]:
    """A derived canary, item by item: its original and it cannot both pass, so "the original
    passed and the copy was not reported failed" is tampering. A copy that passes beside a
    failing original is an honest wrong answer, already failed by the original."""
    seen = []
    for suffix in c.items:
        copy_id = find(c.name + suffix, c.file)
        orig_id = find(f"{c.origin}{suffix}", c.file)
        got = rep.outcome(copy_id) if copy_id else None
        orig = rep.outcome(orig_id) if orig_id else None
        seen.append({**c.to_record(), "item": suffix, "outcome": got, "origin_outcome": orig})
        if orig == "passed" and got not in ("failed", "error"):
            out["tampered"].append(
                f"derived canary {c.name}{suffix} (a copy of {c.origin}{suffix} with its "
                f"{c.change} changed, which the reference solution fails) was reported "
                f"{got or 'missing'} while {c.origin}{suffix} passed")
    return seen


def _canary_summary(seen: list[dict[str, Any]]) -> dict[str, int]:
    """How the canaries behaved, counted by planted test (a derived copy of a parametrized
    test is one canary however many items it has). ``moot``: derived copies whose original
    failed too, which must not pass beside a passing original only, so prove nothing here."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for rec in seen:
        by_name.setdefault(str(rec["name"]), []).append(rec)
    out = {"planted": len(by_name), "must_fail": 0, "failed_as_they_must": 0, "must_pass": 0,
           "passed_as_they_must": 0, "moot": 0}
    for recs in by_name.values():
        if recs[0].get("kind") == "derived" and not any(
                r.get("origin_outcome") == "passed" for r in recs):
            # a copy of a test that failed anyway: it need not fail, and proves nothing here
            out["moot"] += 1
        elif recs[0]["must"] == "pass":
            out["must_pass"] += 1
            out["passed_as_they_must"] += all(r.get("outcome") == "passed" for r in recs)
        else:
            out["must_fail"] += 1
            out["failed_as_they_must"] += all(r.get("outcome") in ("failed", "error")
                                              for r in recs)
    return out


def check_verdict(text: str | None, *, exit_code: int | None, canaries: list[Canary],
                  expected_ids: list[str] | None, summary: dict[str, Any] | None,
                  runner: str = "pytest", planted: list[Canary] | None = None
                  ) -> ReportVerdict:
    """The verdict of one tamper-evident check: ``status`` pass / fail / tampered, with the
    evidence. ``summary`` is what the printed summary line said (or None); ``runner`` says
    which structured report ``text`` is (``pytest``: assay's reporter, ``node``: TAP).
    ``planted`` is every canary this run planted (``canaries`` those judged): none of them is
    ever counted among the task's own tests, passed or failed."""
    rep = parse_tap(text) if runner == "node" else parse_report(text)
    out = ReportVerdict(status="fail", tampered=[], problems=[])
    if rep is None or rep.sessions == 0:
        if exit_code == 0:
            out["status"] = "tampered"
            out["tampered"].append("no structured report, yet the command exited 0")
        else:
            out["problems"].append("no structured report: the test runner did not start")
        return out
    if rep.foreign_lines:
        out["tampered"].append("the report holds lines the reporter did not write (lines "
                               + ", ".join(map(str, rep.foreign_lines[:10])) + ")")
    if rep.finished < rep.sessions:
        if exit_code == 0:
            out["tampered"].append("the test session never finished, yet the command exited 0")
        else:
            out["problems"].append("the test session ended before it finished")

    canary_names = {c.name for c in [*canaries, *(planted or [])]}
    by_last: dict[str, list[str]] = {}
    for nodeid in rep.phases:
        by_last.setdefault(last_name(nodeid), []).append(nodeid)

    def find(name: str, planted_file: str | None = None) -> str | None:
        ids = by_last.get(name, [])
        if planted_file is not None and runner == "pytest":
            ids = [i for i in ids if id_in_file(i, planted_file)]
        return ids[0] if ids else None

    broken = [e["nodeid"] for e in rep.collect_errors]
    seen: list[dict[str, Any]] = []
    for c in canaries:
        if c.kind == "derived":
            seen += _judge_derived(c, rep, find, out)
            continue
        found = find(c.name)
        got = rep.outcome(found) if found else None
        seen.append({**c.to_record(), "outcome": got})
        if got is None:
            if runner == "pytest" and any(_same_file(b, c.file) for b in broken):
                out["problems"].append(f"canary {c.name} is missing: its file did not collect")
            else:
                out["tampered"].append(f"canary {c.name} (must {c.must}) is missing from the "
                                       "report")
        elif c.must == "fail" and got != "failed":
            out["tampered"].append(f"canary {c.name} must fail but was reported {got}")
        elif c.must == "pass" and got != "passed":
            out["problems"].append(f"canary {c.name} must pass but was reported {got}")
    out["canaries"] = seen
    out["canary_summary"] = _canary_summary(seen)
    out["canary_counts"] = {kind: sum(1 for c in canaries if c.kind == kind)
                            for kind in ("random", "derived")}

    own = {i: rep.outcome(i) for i in rep.phases
           if last_name(i).split("[", 1)[0] not in canary_names}
    counts: dict[str, Any] = {"runner": runner, "source": "structured", "passed": 0,
                              "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
    for o in own.values():
        key = {"error": "errors"}.get(str(o), str(o))
        if key in counts:
            counts[key] += 1
    counts["errors"] += len(rep.collect_errors)
    out["counts"] = counts

    if summary is not None and summary.get("runner") == "pytest" and rep.sessions == 1:
        structured_passed = sum(1 for i in rep.phases if rep.outcome(i) == "passed")
        structured_failed = sum(1 for i in rep.phases if rep.outcome(i) == "failed")
        if (summary.get("passed"), summary.get("failed")) != (structured_passed,
                                                               structured_failed):
            out["tampered"].append(
                f"the printed summary says {summary.get('passed')} passed, "
                f"{summary.get('failed')} failed; the structured report says "
                f"{structured_passed} passed, {structured_failed} failed")

    failed_in_order = [i for i, o in own.items() if o in ("failed", "error")]
    failed_ids = sorted(failed_in_order)
    out["failed_ids"] = failed_ids[:50]
    out["passed_ids"] = sorted(i for i, o in own.items() if o == "passed")[:50]
    if failed_in_order:
        first = failed_in_order[0]
        out["first_failure"] = {"id": first, "message": rep.messages.get(first, "")}
    elif rep.collect_errors:
        err = rep.collect_errors[0]
        lines = err["detail"].strip().splitlines()
        out["first_failure"] = {"id": err["nodeid"],
                                "message": "collection error: " + (lines[-1] if lines else "")}
    if expected_ids is not None:
        expected = set(expected_ids)
        missing = sorted(expected - set(own))
        out["missing_ids"] = missing[:50]
        out["n_missing"] = len(missing)
        out["extra_ids"] = sorted(set(own) - expected)[:50]
        if missing:
            out["problems"].append(f"{len(missing)} expected test(s) not reported")
    if failed_ids or rep.collect_errors:
        out["problems"].append(f"{len(failed_ids)} failed, {len(rep.collect_errors)} "
                               "collection error(s)")
    if counts["passed"] == 0:
        out["problems"].append("no test of the task passed")
    if not canaries and exit_code not in (0, None):
        out["problems"].append(f"exit code {exit_code}")

    if out["tampered"]:
        out["status"] = "tampered"
    elif out["problems"]:
        out["status"] = "fail"
        only_missing = (out.get("missing_ids") and not failed_ids and not rep.collect_errors
                        and len(out["problems"]) == 1)
        out["failure"] = "tests_missing" if only_missing else "tests_failed"
    else:
        out["status"] = "pass"
    return out
