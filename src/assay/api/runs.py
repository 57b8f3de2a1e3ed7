"""Model runs from Python: the same run directory ``assay run`` leaves, from the same inputs.

A run is planned, then executed. :func:`prepare` loads the suite, resolves every parameter
(suite file first, then the caller's overrides) and the endpoint, and checks the sandbox; it
writes nothing and asks no model, so every input mistake surfaces before a paid call.
:func:`execute` serves a built-in model if asked for one, runs or resumes into the run
directory, and rebuilds the report files. :func:`run` is the two in one call.

The library is silent: progress goes to the ``progress`` object given (default none), and
what a person should know before the run (where the labels came from) is in
:attr:`RunPlan.notes` for the caller to show. Ctrl-C is not caught: ``KeyboardInterrupt``
reaches the caller with every finished row on disk, and the same call resumes.

Heavy modules (the HTTP client, the runner) are imported inside the functions, so importing
this module, as the CLI does at start-up, stays cheap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.api.options import (
    CODING_DEFAULTS,
    ENDPOINT_OPTIONS,
    SHARED_DEFAULTS,
    Endpoint,
    check_overrides,
    resolve_endpoint,
)
from assay.errors import InputError, NotComparable
from assay.suites.kind import SuiteKind, suite_kind

if TYPE_CHECKING:
    from assay.models.builtin import BuiltinModel
    from assay.records.report import (
        CodingComparison,
        CodingReport,
        NarrowComparison,
        NarrowReport,
    )
    from assay.records.statuses import RunStatus
    from assay.runner.coding import CodingParams
    from assay.runner.narrow import NarrowParams
    from assay.runner.progress import Progress
    from assay.suites.cases import NarrowSuite
    from assay.suites.coding import CodingSuite

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class RunPlan:
    """Everything a run will do, decided before anything is written."""

    kind: SuiteKind
    suite: NarrowSuite | CodingSuite
    model: str
    params: NarrowParams | CodingParams
    run_dir: Path
    base_url: str | None  # None: a built-in model, served on a loopback port while it runs
    api_key: str = field(repr=False)  # never recorded anywhere
    api_key_env: str | None  # the variable the key came from, for the manifest
    builtin: BuiltinModel | None = field(default=None, repr=False)
    notes: tuple[str, ...] = ()  # facts a person should see before the run starts


@dataclass(frozen=True)
class RunResult:
    """What one call of :func:`execute` did, and the report of the run directory after it.

    ``status`` is this session's: ``complete``, ``infra_errors`` (some rows ended in infra
    errors; run again to retry them) or ``aborted`` (the endpoint refused for good, e.g. a bad
    key; ``message`` says why). The counts from ``report`` cover the whole run directory,
    including earlier sessions."""

    run_dir: Path
    kind: SuiteKind
    status: RunStatus
    report: dict[str, Any]
    rows_written: int  # rows this session appended
    message: str | None = None

    @property
    def infra_errors(self) -> int:
        """Units of work whose standing row is an infra error (excluded from the figures)."""
        return int(self.report["infra_errors"])

    @property
    def missing_rows(self) -> int:
        """Units of work with no row at all yet."""
        return int(self.report["missing_rows"])

    @property
    def complete(self) -> bool:
        """Every unit of work answered: nothing to resume."""
        return self.status != "aborted" and not self.infra_errors and not self.missing_rows

    @property
    def figures(self) -> NarrowReport | CodingReport:
        """``report`` as its record model (``docs/records.md``): ``result.figures.accuracy``,
        ``result.figures.accuracy_ci95``."""
        from assay.records.io import read_json_file
        from assay.records.report import report_record

        # read back from report.json: the run's own ``report`` keeps long lists on disk
        # (report/spilled.py), which a model would pull into memory under another type
        path = self.run_dir / "report.json"
        return report_record(read_json_file(path), path)


def load_suite(path: PathLike, *, split: str | None = None,
               tier: str | None = None) -> NarrowSuite | CodingSuite:
    """Load and validate the suite at ``path`` (a narrow suite folder, a coding ``tasks.jsonl``
    or a folder holding one); :class:`SuiteError` names every problem's file, line and field."""
    from assay.suites.cases import load_suite as load_narrow
    from assay.suites.coding import load_coding_suite

    kind, where = suite_kind(Path(path))
    if kind == "coding":
        if split is not None:
            raise InputError(f"split={split!r}: coding suites have no splits")
        if tier is not None:
            raise InputError(f"tier={tier!r}: coding task files have no tiers")
        return load_coding_suite(where)
    return load_narrow(where, split=split, tier=tier)


def _split_of(suite: NarrowSuite, split: str | None) -> str | None:
    """The split a loaded suite's cases come from: a given ``split`` must agree with it."""
    from assay.suites.cases import CASES_FILE

    named = [s for s, rel in suite.config.splits.items()
             if (suite.root / rel).resolve() == suite.cases_path.resolve()]
    if split is None:
        if (suite.root / CASES_FILE).resolve() == suite.cases_path.resolve():
            return None
        return named[0] if named else None
    if split not in named:
        raise InputError(f"split={split!r}: the suite given was loaded from "
                         f"{suite.cases_path}, not from that split")
    return split


def prepare(suite: PathLike | NarrowSuite | CodingSuite, model: str, *,
            out: PathLike | None = None, endpoint: Endpoint | None = None,
            **overrides: Any) -> RunPlan:
    """Plan a run of ``model`` on ``suite`` without writing anything or asking any model.

    ``suite`` is a path (see :func:`load_suite`) or a suite already loaded. ``model`` is
    ``builtin/baseline``, ``builtin/oracle`` or a model name at an OpenAI-compatible endpoint
    (``base_url=``, ``api_key=``, ``api_key_env=``, else ``MODEL_BASE_URL``/``MODEL_API_KEY``).
    Overrides (``None`` means not given): ``temperature``, ``max_tokens``, ``concurrency``,
    ``timeout``, ``max_tries``; narrow suites also ``repeats``, ``split``; coding suites also
    ``samples``, ``sandbox``, ``exec_timeout``, ``memory_mib``, ``pids``. A narrow suite's
    defaults come from its ``suite.yaml``, the rest from :mod:`assay.api.options`. ``out`` is
    the run directory (default ``runs/<suite>-<model>-<UTC time>``); an existing one resumes.
    ``endpoint``: one already resolved by :func:`~assay.api.options.resolve_endpoint` (the CLI
    resolves with its own option names), instead of the endpoint options."""
    from assay.models.builtin import BUILTIN_PREFIX, load_builtin
    from assay.runner.narrow import default_run_dir
    from assay.suites.coding import CodingSuite

    if not isinstance(model, str) or not model.strip():
        raise InputError("no model: name one, e.g. builtin/baseline")
    if isinstance(suite, str | os.PathLike):
        loaded = load_suite(suite, split=overrides.get("split"))
    else:
        loaded = suite
    kind: SuiteKind = "coding" if isinstance(loaded, CodingSuite) else "narrow"
    given = check_overrides(kind, overrides)
    builtin = model.startswith(BUILTIN_PREFIX)
    if endpoint is None:
        endpoint = resolve_endpoint(model, given, builtin=builtin)
    elif any(given.get(k) is not None for k in ENDPOINT_OPTIONS):
        raise InputError("give endpoint= or the endpoint options (base_url=, api_key=, "
                         "api_key_env=), not both")
    served = None
    if builtin:
        try:
            served = load_builtin(model, loaded)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    notes: list[str] = list(endpoint.notes)
    params: NarrowParams | CodingParams
    if kind == "coding":
        params = _coding_params(given)
        from assay.api.sandbox import require_sandbox

        require_sandbox(params.isolation)
    else:
        narrow: NarrowSuite = loaded  # type: ignore[assignment]
        params = _narrow_params(narrow, given, _split_of(narrow, given.get("split")))
        if narrow.scorer.type == "judge":  # its endpoint must be named before anything runs
            from assay.grading.answers.scorer_judge import check_judge_endpoint

            check_judge_endpoint(narrow)
        if narrow.labels_source == "cases":
            notes.append(f"labels taken from the expected values in {narrow.cases_path.name} "
                         f"(no labels in suite.yaml): {', '.join(narrow.labels)}")
    run_dir = Path(out) if out is not None else default_run_dir(loaded.name, model)
    return RunPlan(kind=kind, suite=loaded, model=model, params=params, run_dir=run_dir,
                   base_url=endpoint.base_url, api_key=endpoint.api_key,
                   api_key_env=endpoint.api_key_env, builtin=served, notes=tuple(notes))


def _narrow_params(suite: NarrowSuite, given: dict[str, Any], split: str | None
                   ) -> NarrowParams:
    from assay.runner.narrow import NarrowParams

    def pick(name: str) -> Any:
        return given.get(name, SHARED_DEFAULTS[name])

    cfg = suite.config
    return NarrowParams(
        temperature=float(given.get("temperature", cfg.temperature)),
        repeats=given.get("repeats", cfg.repeats),
        max_tokens=given.get("max_tokens", cfg.max_tokens),
        concurrency=pick("concurrency"), timeout_s=float(pick("timeout")),
        max_tries=pick("max_tries"), split=split)


def _coding_params(given: dict[str, Any]) -> CodingParams:
    from assay.runner.coding import CodingParams

    def pick(name: str) -> Any:
        return given.get(name, CODING_DEFAULTS.get(name, SHARED_DEFAULTS.get(name)))

    return CodingParams(
        samples=pick("samples"), temperature=float(pick("temperature")),
        max_tokens=given.get("max_tokens"), concurrency=pick("concurrency"),
        timeout_s=float(pick("timeout")), max_tries=pick("max_tries"),
        exec_timeout_s=float(pick("exec_timeout")), memory_mib=pick("memory_mib"),
        pids=pick("pids"), isolation=pick("sandbox"))


def execute(plan: RunPlan, progress: Progress[dict[str, Any]] | None = None) -> RunResult:
    """Run (or resume) ``plan`` into its run directory, then rebuild report.json/.md/.html.

    Raises :class:`RunConflict` when the directory holds a different run; a built-in model's
    server lives exactly as long as this call."""
    import asyncio

    from assay.models.server import BackgroundServer
    from assay.runner.coding import run_coding
    from assay.runner.narrow import Endpoint, run_narrow
    from assay.runner.progress import NullProgress

    shown = progress if progress is not None else NullProgress()
    runner: Any = run_coding if plan.kind == "coding" else run_narrow
    if plan.builtin is not None:
        with BackgroundServer(plan.builtin) as server:
            endpoint = Endpoint(server.base_url, plan.model, "", None, builtin=True)
            session = asyncio.run(runner(plan.suite, endpoint, plan.params, plan.run_dir, shown))
    else:
        assert plan.base_url is not None
        endpoint = Endpoint(plan.base_url, plan.model, plan.api_key, plan.api_key_env)
        session = asyncio.run(runner(plan.suite, endpoint, plan.params, plan.run_dir, shown))
    return RunResult(run_dir=plan.run_dir, kind=plan.kind, status=session.status,
                     report=rebuild_report(plan.run_dir), rows_written=session.rows_written,
                     message=session.message)


def run(suite: PathLike | NarrowSuite | CodingSuite, model: str, *, out: PathLike | None = None,
        progress: Progress[dict[str, Any]] | None = None, **overrides: Any) -> RunResult:
    """Evaluate ``model`` on ``suite``: :func:`prepare` then :func:`execute` (see both for the
    arguments). Calling it again with the same ``out`` resumes the run."""
    return execute(prepare(suite, model, out=out, **overrides), progress)


def _require_run_dir(run_dir: Path) -> None:
    from assay.records.manifest import MANIFEST

    if not (run_dir / MANIFEST).is_file():
        raise InputError(f"{run_dir}: no manifest.json: not an assay run directory")


def rebuild_report(run_dir: PathLike, *, grade_revision: str | None = None,
                   rubric_round: str | None = None) -> dict[str, Any]:
    """Rebuild report.json, report.md and report.html from a run directory's records alone,
    and return the report (its ``schema`` says which kind). Coding runs are reported from
    ``grade_revision``, else their newest grade revision, and with their human rubric grades
    as of ``rubric_round``, else the latest grading round."""
    from assay.records.manifest import read_manifest
    from assay.report.files import write_reports
    from assay.report.html import write_html

    where = Path(run_dir)
    _require_run_dir(where)
    if read_manifest(where).get("kind") == "coding":
        from assay.report.coding import build_coding_report
        from assay.report.coding_markdown import coding_markdown

        rep = build_coding_report(where, grade_revision, rubric_round)
        write_reports(where, rep, coding_markdown(rep))
        write_html(where, rep, "coding")
        return rep
    from assay.report.narrow import build_report
    from assay.report.render_narrow import to_markdown

    if rubric_round is not None:
        raise InputError(f"{where}: --rubric-round is for coding runs; this is a narrow run")
    rep = build_report(where)
    write_reports(where, rep, to_markdown(rep))
    write_html(where, rep, "narrow")
    return rep


def compare(run_a: PathLike, run_b: PathLike, *, seed: int = 0,
            rubric_round: str | None = None) -> dict[str, Any]:
    """Paired comparison of two runs of the same suite (B − A), narrow or coding as their
    manifests say; :class:`NotComparable` when they cannot be paired. Coding runs' rubric
    grades are read as of ``rubric_round`` (default: each run's latest grading round)."""
    from assay.records.manifest import read_manifest
    from assay.report.compare_coding import compare_coding_runs
    from assay.report.compare_narrow import compare_runs

    a, b = Path(run_a), Path(run_b)
    kinds = set()
    for d in (a, b):
        _require_run_dir(d)
        kinds.add(read_manifest(d).get("kind"))
    if len(kinds) != 1:
        raise NotComparable("cannot compare a narrow-task run with a coding run")
    if kinds == {"coding"}:
        return compare_coding_runs(a, b, seed=seed, rubric_round=rubric_round)
    if rubric_round is not None:
        raise InputError("--rubric-round is for coding runs; these are narrow runs")
    return compare_runs(a, b, seed=seed)


def comparison(run_a: PathLike, run_b: PathLike, *, seed: int = 0,
               rubric_round: str | None = None) -> NarrowComparison | CodingComparison:
    """:func:`compare` as its record model (``assay.narrow.compare`` or
    ``assay.coding.compare`` in ``docs/records.md``): ``comparison(a, b).diff_ci95``."""
    from assay.records.report import comparison_record

    return comparison_record(compare(run_a, run_b, seed=seed, rubric_round=rubric_round),
                             f"compare {run_a} {run_b}")


__all__ = ["RunPlan", "RunResult", "SuiteKind", "compare", "comparison", "execute", "load_suite",
           "prepare", "rebuild_report", "run", "suite_kind"]
