"""The test ids a check must report, learned from trusted code only.

The candidate's code can hide a test from the runner as easily as it can fake a pass, so the
list of tests a check must report passed cannot come from the candidate's own run. It is
collected by the verifier on the **pristine starting tree with the task's reference solution
applied** (``solution/solve.patch``; the pristine tree alone when the bundle has none): that tree
holds no candidate code, and with the solution applied a hidden test that imports a name the fix
adds is still collected. The same command runs in collect mode (the pytest reporter records the
ids and runs nothing; node's runner has no such mode, so a node command runs in full and its TAP
report lists the ids), with a canary pair planted in every test file, which also tells which
files' canaries the command collects at all.

For a pytest check the same trusted tree then runs the check in full once more, with every
derived canary candidate (``canary_derive.py``: copies of the test files' own functions with one
assertion changed) planted right after its original: a copy is kept for later verifications only
if it failed there while its original passed (how many were made, kept and dropped is recorded).
That run is also the trusted tree's own time for the whole check, which is how a check that runs
out of time on a candidate is told apart from a check the grader could not run at all.

Collecting costs a pytest start-up per check, so the result is cached on the host, outside any
sandbox, under a key made of everything it depends on (the command, the starting tree's digest,
the hidden tests, the solution, the reporter itself); a changed bundle is a new key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from assay.grading.verify import canaries, canary_derive
from assay.grading.verify.canaries import id_in_file
from assay.grading.verify.canary_derive import Mutation, derive, text_sha256
from assay.grading.verify.check_run import DerivedPlan, canary_targets, reporter_source, run_command
from assay.grading.verify.test_report import ParsedReport, last_name, parse_report, parse_tap
from assay.records.io import atomic_write_json
from assay.suites.bundle import Bundle, tree_digest


class TrustedRun(TypedDict, total=False):
    """How a check ran on the trusted tree (pristine plus the reference fix)."""

    key: str  # the host cache's key, when read from or written to the cache
    reason: str  # the sandbox's: ok, nonzero_exit, timeout, sandbox_error, ...
    exit_code: int | None
    wall_seconds: float
    cache: str  # hit, miss, or hit (this process)


class TrustedTests(TypedDict, total=False):
    """A check's collection on the trusted tree (:func:`expected_tests`), as the host cache
    holds it. ``report`` False: the command wrote no structured report there."""

    report: bool
    runner: str | None  # pytest or node
    ids: list[str]  # the test ids a candidate's run must report
    canary_files: list[str]
    collect_errors: list[dict[str, Any]]
    source: str  # what the trusted tree was made of
    exit_code: int | None
    reason: str
    wall_seconds: float
    trusted_run: TrustedRun  # pytest: the full run that validated the derived canaries
    derived_stats: dict[str, int]  # derived canaries generated, ran, kept, dropped
    derived: dict[str, dict[str, Any]]  # per planted file: its sha256 and kept mutations
    key: str
    cache: str

CACHE_VERSION = 3


def cache_dir() -> Path:
    base = os.environ.get("ASSAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "assay")
    return Path(base) / "expected-tests"


def _solution(bundle: Bundle) -> Path | None:
    patch = bundle.solution_dir / "solve.patch"
    return patch if patch.is_file() else None


def cache_key(bundle: Bundle, command: str, fixture_digest: str) -> str:
    patch = _solution(bundle)
    parts = {
        "version": CACHE_VERSION,
        "reporter": hashlib.sha256(reporter_source()).hexdigest(),
        # how canaries are made and validated: a change there is a new validation
        "canaries": hashlib.sha256(b"".join(Path(str(m.__file__)).read_bytes()
                                            for m in (canaries, canary_derive))).hexdigest(),
        "command": command,
        "fixture_digest": fixture_digest,
        "tests": tree_digest(bundle.tests_dir) if bundle.tests_dir.is_dir() else None,
        "solution": hashlib.sha256(patch.read_bytes()).hexdigest() if patch else None,
        "protected_paths": bundle.spec.acceptance.protected_paths,
        "limits": [bundle.spec.budget.verifier_wall_seconds,
                   bundle.spec.resources.memory_limit_mib, bundle.spec.resources.pids],
    }
    image = bundle.spec.initial_state.environment_image
    if image is not None:  # what ran the trusted tree is part of what it found (host: as before)
        parts["environment_image"] = image
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _apply_solution(tree: Path, patch: Path) -> str | None:
    """Apply the reference fix on the host (task author's code, as trusted as the tests);
    None on success, else why not."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    res = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())],
                         cwd=tree, capture_output=True, timeout=60, env=env, check=False)
    if res.returncode != 0:
        return res.stderr.decode(errors="replace").strip()[-300:] or "git apply failed"
    return None


def collect(bundle: Bundle, command: str, pristine: Path) -> TrustedTests:
    """Run the collection and, for pytest, the validation of derived canaries (no cache):
    ``{"report": bool, "ids", "canary_files", "collect_errors", "source", "derived",
    "trusted_run"}``."""
    patch = _solution(bundle)
    with tempfile.TemporaryDirectory(prefix="assay-collect-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(pristine, tree, symlinks=True)
        source = "pristine starting tree"
        if patch is not None:
            why = _apply_solution(tree, patch)
            source = ("pristine starting tree + solution/solve.patch" if why is None
                      else f"pristine starting tree (solve.patch did not apply: {why})")
        run = run_command(command, tree, bundle, record_dir=None, tamper_evident=True,
                          mode="collect")
        runner = run.runner
        rep = parse_tap(run.tap_text) if runner == "node" else parse_report(run.report_text)
        if rep is None or rep.sessions == 0:
            return TrustedTests(report=False, runner=None, ids=[], canary_files=[],
                                collect_errors=[], source=source,
                                exit_code=run.result.exit_code, reason=run.result.reason,
                                wall_seconds=round(run.result.wall_seconds, 3))
        names = {c.name: c for c in run.canaries}
        ids, files = [], set()
        for nodeid in rep.collected:
            name = last_name(nodeid)
            if name in names:
                files.add(names[name].file)
            else:
                ids.append(nodeid)
        found = TrustedTests(
            report=True, runner=runner, ids=sorted(set(ids)), canary_files=sorted(files),
            collect_errors=rep.collect_errors, source=source, exit_code=run.result.exit_code,
            reason=run.result.reason)
        if runner == "pytest":
            found.update(_validate_derived(bundle, command, tree))
    return found


def _validate_derived(bundle: Bundle, command: str, tree: Path) -> TrustedTests:
    """Make the derived canary candidates of every test file the check plants into, run the
    check in full on the trusted tree with all of them, keep those that failed while their
    original passed."""
    hidden, own = canary_targets(bundle, tree, bundle.tests_dir)
    files: dict[str, tuple[str, list[Mutation]]] = {}
    for root, label, rels in ((bundle.tests_dir, "tests", hidden), (tree, "work", own)):
        for rel in rels:
            try:
                text = (root / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            digest = text_sha256(text)
            made = derive(text, seed=int(digest[:12], 16))
            if made:
                files[f"{label}/{rel}"] = (digest, made)
    generated = sum(len(m) for _, m in files.values())
    run = run_command(command, tree, bundle, record_dir=None, tamper_evident=True,
                      canaries=False, derived=DerivedPlan(files, "validate", 0))
    trusted_run = TrustedRun(reason=run.result.reason, exit_code=run.result.exit_code,
                             wall_seconds=round(run.result.wall_seconds, 3))
    rep = parse_report(run.report_text)
    kept: dict[str, list[Mutation]] = {}
    if rep is not None and run.result.reason not in ("timeout", "sandbox_error"):
        for c in run.canaries:
            m = (run.derived_sources or {}).get(c.name)
            if m is None:
                continue
            items = _failed_beside_passing_original(rep, c.file, c.name, m.origin)
            if items:
                kept.setdefault(c.file, []).append(Mutation(m.origin, m.kind, m.source, items))
    collected = {last_name(i).split("[", 1)[0] for i in (rep.collected if rep else [])}
    ran = sum(1 for c in run.canaries if c.name in collected)
    # made: from every test file a check may plant into; ran: those this check's command
    # collects; dropped: ran but did not fail beside a passing original
    stats = {"generated": generated, "ran": ran, "kept": sum(len(v) for v in kept.values())}
    stats["dropped"] = ran - stats["kept"]
    return TrustedTests(
        trusted_run=trusted_run, derived_stats=stats,
        derived={f: {"sha256": files[f][0], "mutations": [m.to_record() for m in ms]}
                 for f, ms in sorted(kept.items())})


def _failed_beside_passing_original(rep: ParsedReport, planted_file: str, name: str,
                                    origin: str) -> tuple[str, ...]:
    """The id suffixes (``""``, ``"[param]"``) of a copy's items that failed on the trusted
    tree while the same item of the original passed."""
    outcomes = {nodeid: rep.outcome(nodeid) for nodeid in rep.phases
                if id_in_file(nodeid, planted_file)}
    by_name = {last_name(i): o for i, o in outcomes.items()}
    out = []
    for full, outcome in sorted(by_name.items()):
        if full.split("[", 1)[0] != name or outcome != "failed":
            continue
        suffix = full[len(name):]
        if by_name.get(origin + suffix) == "passed":
            out.append(suffix)
    return tuple(out)


def derived_plan(trusted: TrustedTests, seed: int) -> DerivedPlan | None:
    """One verification's plan from the cached validation (None when nothing was kept)."""
    files = {f: (str(v["sha256"]), [Mutation.from_record(m) for m in v["mutations"]])
             for f, v in (trusted.get("derived") or {}).items()}
    return DerivedPlan(files, "draw", seed) if files else None


#: Commands that ran cleanly on the trusted tree without writing a structured report (not a
#: runner assay reads: unittest, a script), per process. Such a command runs in full there, so
#: asking again for every trial doubled each check's cost. Kept in memory only: a later
#: process must see a changed environment (pytest installed since, say), which the disk
#: cache's key does not cover.
_NO_REPORT: dict[str, TrustedTests] = {}


def _cached(path: Path, key: str) -> Any:
    """A host-cache entry written for ``key`` (marked as a hit), or None: a missing, torn or
    foreign file only costs a new run on the trusted tree."""
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(cached, dict) and cached.get("key") == key:
        return {**cached, "cache": "hit"}
    return None


def expected_tests(bundle: Bundle, command: str, pristine: Path,
                   fixture_digest: str) -> TrustedTests:
    """The trusted collection for ``command``, from the cache when it is there."""
    key = cache_key(bundle, command, fixture_digest)
    if key in _NO_REPORT:
        return {**_NO_REPORT[key], "cache": "hit (this process)"}
    path = cache_dir() / f"{key}.json"
    cached = _cached(path, key)
    if cached is not None:
        return TrustedTests(**cached)
    found = collect(bundle, command, pristine)
    found["key"] = key
    if not found["report"] and found["reason"] == "ok" and found["exit_code"] == 0:
        _NO_REPORT[key] = found
    validated = (found.get("trusted_run") or {}).get("reason") not in ("timeout",
                                                                        "sandbox_error")
    if found["report"] and found["reason"] not in ("timeout", "sandbox_error") and validated:
        try:
            atomic_write_json(path, found)
        except OSError:
            pass  # a read-only cache only costs time
    return {**found, "cache": "miss"}


#: The trusted tree must finish a check within this share of ``verifier_wall_seconds`` for a
#: time-out on the candidate's tree to be the candidate's: closer to the limit, machine load
#: alone could explain it, and the grader does not know.
TRUSTED_SHARE = 0.5


def trusted_timing(bundle: Bundle, command: str, pristine: Path,
                   fixture_digest: str) -> TrustedRun:
    """How the check runs on the trusted tree (reason, exit code, wall seconds): from the
    tamper-evident collection's validation run when there was one, else one plain run of the
    command there, cached on the host like the expected ids."""
    key = cache_key(bundle, command, fixture_digest) + "-timing"
    path = cache_dir() / f"{key}.json"
    cached = _cached(path, key)
    if cached is not None:
        return TrustedRun(**cached)
    patch = _solution(bundle)
    with tempfile.TemporaryDirectory(prefix="assay-timing-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(pristine, tree, symlinks=True)
        if patch is not None:
            _apply_solution(tree, patch)
        run = run_command(command, tree, bundle, record_dir=None, tamper_evident=False)
    found = TrustedRun(key=key, reason=run.result.reason, exit_code=run.result.exit_code,
                       wall_seconds=round(run.result.wall_seconds, 3))
    if found["reason"] not in ("timeout", "sandbox_error"):
        try:
            atomic_write_json(path, found)
        except OSError:
            pass
    return {**found, "cache": "miss"}


def timeout_owner(trusted_run: TrustedRun | None, limit: float) -> tuple[str, str]:
    """Whose fault a check's time-out is: ``("candidate", why)`` when the trusted tree ran the
    same check well inside the limit, else ``("grader", why)``."""
    if not trusted_run:
        return "grader", "the check's time on the trusted tree is unknown"
    reason, wall = trusted_run.get("reason"), trusted_run.get("wall_seconds")
    if reason in ("timeout", "sandbox_error") or wall is None:
        return "grader", f"the same check on the trusted tree ended in {reason}"
    if wall > TRUSTED_SHARE * limit:
        return "grader", (f"the trusted tree needs {wall:.1f}s of the {limit:g}s limit: too "
                          "close to it to blame the candidate")
    return "candidate", (f"the same check finished in {wall:.1f}s on the trusted tree "
                         f"(limit {limit:g}s); the candidate's tree did not finish")
