"""Broken and hostile input files, as a careless user or an attacker writes them, through the
real CLI: every one exits 2 with one message naming the file (and the line, where there is
one), without a traceback, and without writing anything (no run directory, no file touched).

The table covers task bundles (paths that leave the bundle, by ``..``, absolute paths and
symbolic links; oversized, non-UTF-8, duplicated and alias-bombed task.yaml; budgets past their
bounds), experiment files (a duplicate arm, ``repetitions: 1000000000``, a plan too large, a
billion-laughs file, a 60 MB file, a FIFO, missing bundles, judges and replay scripts), narrow
and coding suites (suite.yaml, cases and tasks JSONL) and judge files (judge.yaml, rubric). The
two timed cases (billion laughs, 60 MB) allow 5 s on a loaded machine: unbounded, the first
took gigabytes and minutes, the second was still parsing after 120 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli, write_suite
from support.bundles import make_bundle

from assay.sandbox import bwrap_available
from assay.suites.limits import (
    EXPERIMENT_FILE_MAX_BYTES,
    JSONL_LINE_MAX_BYTES,
    PLAN_TRIALS_DEFAULT_MAX,
    TASK_FILE_MAX_BYTES,
)

#: Nine levels of nine aliases: 9^9 (387 million) strings once expanded, 700 bytes as written.
BILLION_LAUGHS = 'lol0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + \
    "".join(f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))

EXPERIMENT = """\
name: hostile
tasks: [tasks]
repetitions: 1
arms:
  mini:
    agent: nop
  big:
    agent: nop
"""

JUDGE = """\
model: judge-model
base_url: http://127.0.0.1:9/v1
rubric: rubric.yaml
"""

RUBRIC = """\
- id: correct
  question: Does the change fix the bug?
  scale: [0, 3]
"""


@dataclass(frozen=True)
class Case:
    """``build(tmp)`` writes the inputs and returns the CLI's arguments, the file (with
    ``:line`` when the message must name one) and a fragment the message must contain."""

    build: Callable[[Path], tuple[list[str], str, str]]
    seconds: float | None = None  # a bound on the refusal's wall time, for the timed cases


# ------------------------------------------------------------------------------ builders


def _bundle(tmp: Path) -> Path:
    return make_bundle(tmp / "tasks" / "calc", task_id="calc")


def _edit_task(tmp: Path, old: str, new: str) -> Path:
    b = _bundle(tmp)
    y = b / "task.yaml"
    text = y.read_text()
    assert old in text, old
    y.write_text(text.replace(old, new, 1))
    return b


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                if needle in line)


def _trial(b: Path, tmp: Path) -> list[str]:
    return ["trial", "run", str(b), "--agent", "nop", "--out", str(tmp / "out")]


def task_field(old: str, new: str, needle: str, fragment: str) -> Case:
    """task.yaml with ``old`` replaced by ``new``; the message points at the line of
    ``needle``."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        b = _edit_task(tmp, old, new)
        return _trial(b, tmp), f"{b / 'task.yaml'}:{_line(b / 'task.yaml', needle)}", fragment
    return Case(build)


def bundle_with(change: Callable[[Path], None], fragment: str, *,
                needle: str | None = None, at: str = "task.yaml") -> Case:
    """A fixture bundle changed on disk by ``change(bundle)``; the message names ``at``."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        b = _bundle(tmp)
        change(b)
        where = str(b / at)
        if needle is not None:
            where += f":{_line(b / 'task.yaml', needle)}"
        return _trial(b, tmp), where, fragment
    return Case(build)


def task_text(text: Callable[[str], str | bytes], fragment: str, *,
              line: int | None = None, seconds: float | None = None) -> Case:
    """task.yaml replaced by ``text(original)``."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        b = _bundle(tmp)
        y = b / "task.yaml"
        new = text(y.read_text())
        if isinstance(new, str):
            new = new.encode()
        y.write_bytes(new)
        return _trial(b, tmp), f"{y}:{line}" if line else str(y), fragment
    return Case(build, seconds)


def _exp_run(exp: Path, tmp: Path) -> list[str]:
    return ["exp", "run", str(exp), "--out", str(tmp / "run")]


def experiment(text: str | bytes | Callable[[Path], str | bytes] | None, fragment: str, *,
               needle: str | None = None, line: int | None = None,
               seconds: float | None = None, at: str | None = None,
               extra: Callable[[Path], None] | None = None) -> Case:
    """An experiment file (``text``; None: ``extra`` makes it) beside a folder of one good
    bundle; ``extra(tmp)`` changes the folder before the run."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        _bundle(tmp)
        if extra is not None:
            extra(tmp)
        exp = tmp / "experiment.yaml"
        if text is not None:
            body = text(tmp) if callable(text) else text
            exp.write_bytes(body.encode() if isinstance(body, str) else body)
        named = tmp / at if at is not None else exp
        where = (f"{named}:{_line(named, needle)}" if needle else f"{named}:{line}" if line
                 else str(named))
        return _exp_run(exp, tmp), where, fragment
    return Case(build, seconds)


def narrow(files: dict[str, str | bytes], fragment: str, *, line: int | None = None,
           at: str | None = None) -> Case:
    """A good narrow suite with ``files`` written over it; the message names ``at``."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        root = write_suite(tmp / "suite", [("c1", "it crashes", "bug"),
                                           ("c2", "add dark mode", "feature")])
        for rel, body in files.items():
            p = root / rel
            p.write_bytes(body.encode() if isinstance(body, str) else body)
        named = root / (at or next(iter(files)))
        where = f"{named}:{line}" if line else str(named)
        return (["run", str(root), "--model", "builtin/oracle", "--out", str(tmp / "run")],
                where, fragment)
    return Case(build)


def judge(files: dict[str, str | bytes], fragment: str, *, at: str = "judge.yaml",
          line: int | None = None, seconds: float | None = None) -> Case:
    """A judge folder (judge.yaml, rubric.yaml) with ``files`` written over it."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        root = tmp / "judge"
        root.mkdir()
        (root / "judge.yaml").write_text(JUDGE)
        (root / "rubric.yaml").write_text(RUBRIC)
        for rel, body in files.items():
            (root / rel).write_bytes(body.encode() if isinstance(body, str) else body)
        where = f"{root / at}:{line}" if line else str(root / at)
        return ["judge", "check", str(root / "judge.yaml")], where, fragment
    return Case(build, seconds)


HARBOR_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "harbor-tasks" / \
    "csv-column-total"


def harbor(toml: str, fragment: str) -> Case:
    """The example Harbor task with its task.toml replaced, imported with ``task
    import-harbor``."""
    def build(tmp: Path) -> tuple[list[str], str, str]:
        import shutil

        src = tmp / "harbor" / "csv-column-total"
        shutil.copytree(HARBOR_EXAMPLE, src, symlinks=True)
        (src / "task.toml").write_text(toml)
        return (["task", "import-harbor", str(src), "--out", str(tmp / "bundles")],
                str(src / "task.toml"), fragment)
    return Case(build)


def _symlink(link: str, target: str) -> Callable[[Path], None]:
    def change(b: Path) -> None:
        p = b / link
        if p.is_dir() and not p.is_symlink():
            import shutil

            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(target)
    return change


def _bundle_judge(b: Path) -> None:
    (b / "judge.yaml").write_text(JUDGE)
    (b / "rubric.yaml").write_text(RUBRIC)


def _with_judge(judge_path: str) -> Callable[[Path], None]:
    def change(b: Path) -> None:
        _bundle_judge(b)
        y = b / "task.yaml"
        y.write_text(y.read_text() + f"  judge:\n    judge: {judge_path}\n"
                     "    pass: {criterion: correct, at_least: 2}\n")
    return change


def _judge_rubric_out(b: Path) -> None:
    _with_judge("judge.yaml")(b)
    (b / "rubric.yaml").unlink()
    (b.parent.parent / "rubric.yaml").write_text(RUBRIC)
    (b / "rubric.yaml").symlink_to(b.parent.parent / "rubric.yaml")


def _replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _fifo(rel: str) -> Callable[[Path], None]:
    def change(b: Path) -> None:
        (b / rel).unlink()
        os.mkfifo(b / rel)
    return change


def _outside_judge(tmp: Path) -> None:
    (tmp / "tasks" / "judge.yaml").write_text(JUDGE)
    (tmp / "tasks" / "rubric.yaml").write_text(RUBRIC)


def _deep_json(depth: int) -> str:
    return '{"id": "d", "input": "x", "expected": ' + "[" * depth + "]" * depth + "}\n"


def _outcomes(tmp: Path) -> Path:
    p = tmp / "outcomes.jsonl"
    rows = [{"task": t, "arm": arm, "rep": 0, "passed": arm == "mini" or t == "t1"}
            for t in ("t1", "t2", "t3") for arm in ("mini", "big")]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


# ------------------------------------------------------------------------------- the table

CASE_A = b'{"id": "a", "input": "x", "expected": "bug"}\n'
CASE_B_HEAD = b'{"id": "b", "input": "'

CASES: dict[str, Case] = {
    # --- bundles: paths that leave the bundle folder
    "instruction ../../etc/passwd": task_field(
        "instruction: instruction.md", "instruction: ../../../../../../etc/passwd",
        "instruction:", "leads outside the bundle folder"),
    "instruction absolute /etc/shadow": task_field(
        "instruction: instruction.md", "instruction: /etc/shadow", "instruction:",
        "is an absolute path"),
    "instruction.md a symlink to /etc/passwd": bundle_with(
        _symlink("instruction.md", "/etc/passwd"), "through a symbolic link",
        needle="instruction:"),
    "repository ../../etc/ssh": task_field(
        "repository: repo", "repository: ../../../../../../etc/ssh", "repository:",
        "leads outside the bundle folder"),
    "repository absolute": task_field(
        "repository: repo", "repository: /etc", "repository:", "is an absolute path"),
    "repository a symlink to /etc": bundle_with(
        _symlink("repo", "/etc"), "through a symbolic link", needle="repository:"),
    "a link in the starting tree to a host file": bundle_with(
        _symlink("repo/src/calc/secrets.py", "/etc/passwd"),
        "is a symbolic link to '/etc/passwd', outside the bundle folder",
        needle="repository:"),
    "a relative link in the starting tree out of the bundle": bundle_with(
        _symlink("repo/notes", "../../../outside.txt"), "outside the bundle folder",
        needle="repository:"),
    "tests/ a symlink to /etc": bundle_with(
        _symlink("tests", "/etc"), "through a symbolic link"),
    "a link in solution/ out of the bundle": bundle_with(
        _symlink("solution/solve.patch", "/etc/hostname"), "outside the bundle folder"),
    "acceptance.judge outside the bundle": task_field(
        "  allowed_paths:", "  judge: {judge: ../judge.yaml, pass: {criterion: correct, "
        "at_least: 2}}\n  allowed_paths:", "judge:", "leads outside the bundle folder"),
    "a bundle judge's rubric a symlink out": bundle_with(
        _judge_rubric_out, "leads outside", at="judge.yaml"),
    "task.yaml a symlink out of the bundle": bundle_with(
        _symlink("task.yaml", "/etc/passwd"), "through a symbolic link"),
    "instruction.md a FIFO": bundle_with(_fifo("instruction.md"), "instruction.md",
                                         needle="instruction:"),
    # --- bundles: the task file itself
    "task.yaml not UTF-8": task_text(
        lambda t: t.replace("family: arith", "family: ar\xefth").encode("latin-1"),
        "not valid UTF-8: byte 0xef at byte offset", line=4),
    "task.yaml over its size limit": task_text(
        lambda t: t + "#" * (TASK_FILE_MAX_BYTES + 10) + "\n", "over the 256 KiB limit"),
    "task.yaml with a key twice": task_text(
        lambda t: t.replace("revision: 1", "revision: 1\nid: other"), "duplicate key 'id' "
        "(first on line 2)", line=4),
    "task.yaml billion laughs": task_text(
        lambda t: BILLION_LAUGHS + t, "billion laughs", seconds=5),
    "task.yaml recursive alias": task_text(
        lambda t: t.replace("family: arith", "family: &f [a, *f]"), "recursive structure",
        line=4),
    "task.yaml nested 10,000 deep": task_text(
        lambda t: t.replace("family: arith", "family: " + "[" * 10_000 + "]" * 10_000),
        "nest"),
    "task.yaml an impossible date": task_field(
        "family: arith", "family: !!timestamp 2024-13-45", "family:",
        "invalid value: month must be in 1..12"),
    "task.yaml agent wall of 10^12 seconds": task_field(
        "agent_wall_seconds: 30", "agent_wall_seconds: 1000000000000", "agent_wall_seconds",
        "less than or equal to 604800"),
    "task.yaml infinite verifier wall": task_field(
        "verifier_wall_seconds: 30", "verifier_wall_seconds: .inf", "verifier_wall_seconds",
        "less than or equal to 86400"),
    # --- experiment files
    "experiment: an arm named twice": experiment(
        EXPERIMENT + "  mini:\n    agent: oracle\n", "duplicate key 'mini' (first on line 5)",
        line=9),
    "experiment: repetitions 1000000000": experiment(
        EXPERIMENT.replace("repetitions: 1", "repetitions: 1000000000"),
        "less than or equal to 10000", needle="repetitions"),
    "experiment: a plan over the default limit": experiment(
        EXPERIMENT.replace("repetitions: 1", f"repetitions: {PLAN_TRIALS_DEFAULT_MAX // 2 + 1}"),
        "--allow-large-plan", needle="repetitions"),
    "experiment: concurrency 10^6": experiment(
        EXPERIMENT + "concurrency: 1000000\n", "less than or equal to 1024",
        needle="concurrency"),
    "experiment: an infinite total budget": experiment(
        EXPERIMENT + "limits: {total_cost_usd: .inf}\n", "total_cost_usd", needle="limits"),
    "experiment: a 5,000-digit seed": experiment(
        EXPERIMENT + "seed: " + "9" * 5000 + "\n", "an integer written with 5,000 characters",
        needle="seed:"),
    "experiment: a NaN weight": experiment(
        EXPERIMENT + "weights: {calc: .nan}\n", "finite number", needle="weights"),
    "experiment: an infinite parameter": experiment(
        EXPERIMENT.replace("    agent: nop\n", "    agent: nop\n    params: {t: [1, .inf]}\n",
                           1), "NaN or infinite", needle="params"),
    "experiment: 1000 infra retries": experiment(
        EXPERIMENT + "retries: {infra: 1000}\n", "less than or equal to 20", needle="retries"),
    "experiment: billion laughs": experiment(
        BILLION_LAUGHS + EXPERIMENT, "billion laughs", seconds=5),
    "experiment: 60 MB": experiment(
        lambda tmp: EXPERIMENT + "# padding\n" * 6_000_000, "over the 1 MiB limit", seconds=5),
    "experiment: not UTF-8": experiment(
        EXPERIMENT.replace("hostile", "host\xefle").encode("latin-1"),
        "not valid UTF-8: byte 0xef at byte offset 10"),
    "experiment: a FIFO": experiment(
        None, "is not a regular file",
        extra=lambda tmp: os.mkfifo(tmp / "experiment.yaml")),
    "experiment: a missing tasks folder": experiment(
        EXPERIMENT.replace("tasks: [tasks]", "tasks: [tsks]"), "is not a folder",
        needle="tsks"),
    "experiment: a missing replay script": experiment(
        EXPERIMENT.replace("    agent: nop\n", "    agent: nop\n    model: {name: "
                           "builtin/replay, script: nowhere.yaml}\n", 1),
        "no such replay script", needle="nowhere"),
    "experiment: a missing pairwise judge": experiment(
        EXPERIMENT + "pairwise: {judge: nojudge.yaml}\n", "no such judge file",
        needle="nojudge"),
    "experiment: a bundle whose instruction leaves it": experiment(
        EXPERIMENT, "leads outside the bundle folder", at="tasks/calc/task.yaml",
        needle="instruction:", extra=lambda tmp: _replace_in(tmp / "tasks" / "calc" / "task.yaml",
                                      "instruction: instruction.md",
                                      "instruction: ../../../etc/passwd")),
    # --- narrow suites
    "suite.yaml billion laughs": narrow({"suite.yaml": BILLION_LAUGHS}, "billion laughs"),
    "suite.yaml with a key twice": narrow(
        {"suite.yaml": "labels: [bug, feature]\nrepeats: 1\nlabels: [bug]\n"},
        "duplicate key 'labels' (first on line 1)", line=3),
    "suite.yaml not UTF-8": narrow(
        {"suite.yaml": b"description: caf\xe9\n"}, "byte offset 16", line=1),
    "suite.yaml over its size limit": narrow(
        {"suite.yaml": "#" * (1024 * 1024 + 1)}, "over the 1 MiB limit"),
    "cases.jsonl not UTF-8": narrow(
        {"data/cases.jsonl": CASE_A + CASE_B_HEAD + b'\xff", "expected": "bug"}\n'},
        f"byte offset {len(CASE_A) + len(CASE_B_HEAD)}", line=2),
    "cases.jsonl one line over its limit": narrow(
        {"data/cases.jsonl": '{"id": "a", "input": "' + "x" * (JSONL_LINE_MAX_BYTES + 1)
                             + '", "expected": "bug"}\n'}, "limit for one line", line=1),
    "cases.jsonl nested 100,000 deep": narrow(
        {"data/cases.jsonl": _deep_json(100_000)}, "nested too deeply", line=1),
    "cases.jsonl a 5,000-digit number": narrow(
        {"data/cases.jsonl": '{"id": "n", "input": "x", "expected": ' + "9" * 5000 + "}\n"},
        "invalid JSON", line=1),
    "system prompt a FIFO": narrow(
        {}, "is not a regular file", at="prompts/system.txt"),
    # --- Harbor task.toml, imported
    "harbor task.toml a 5,000-digit number": harbor(
        'version = "1.0"\n[verifier]\ntimeout_sec = ' + "9" * 5000 + "\n", "invalid TOML"),
    "harbor task.toml nested 5,000 deep": harbor(
        "a = " + "[" * 5000 + "]" * 5000 + "\n", "invalid TOML"),
    "harbor task.toml over its size limit": harbor(
        "#" * (TASK_FILE_MAX_BYTES + 1) + "\n", "over the 256 KiB limit"),
    # --- judges
    "judge.yaml billion laughs": judge({"judge.yaml": BILLION_LAUGHS + JUDGE},
                                       "billion laughs", seconds=5),
    "judge.yaml with a key twice": judge({"judge.yaml": JUDGE + "model: other\n"},
                                         "duplicate key 'model' (first on line 1)", line=4),
    "judge.yaml over its size limit": judge({"judge.yaml": JUDGE + "#" * 300_000},
                                            "over the 256 KiB limit"),
    "rubric not UTF-8": judge({"rubric.yaml": RUBRIC.replace("fix", "f\xefx")
                               .encode("latin-1")}, "byte offset", at="rubric.yaml", line=2),
    "rubric a scale of 10^70 steps": judge(
        {"rubric.yaml": RUBRIC.replace("[0, 3]", "[0, " + "9" * 70 + "]")},
        "spans at most 1000 steps", at="rubric.yaml", line=3),
    "judge.yaml a rubric path with a NUL byte": judge(
        {"judge.yaml": JUDGE.replace("rubric.yaml", "\"\\0\"")}, "NUL byte", line=3),
    "judge.yaml an infinite temperature": judge(
        {"judge.yaml": JUDGE + "temperature: .inf\n"}, "finite number", line=4),
    "rubric with a key twice": judge({"rubric.yaml": RUBRIC + "  id: again\n"},
                                     "duplicate key 'id'", at="rubric.yaml", line=4),
}


def _fifo_prompt(tmp: Path) -> None:
    p = tmp / "suite" / "prompts" / "system.txt"
    p.unlink()
    os.mkfifo(p)


#: Changes made after a case's files are written (a FIFO cannot be written with write_bytes).
AFTER: dict[str, Callable[[Path], None]] = {"system prompt a FIFO": _fifo_prompt}


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its type, size and modification time (links not
    followed): what "nothing was written" is checked against."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _squash(text: str) -> str:
    return "".join(text.split())


def test_the_table_has_at_least_30_kinds() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_is_refused_with_a_message_and_nothing_written(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anything written by default (runs/...) lands here
    case = CASES[name]
    args, where, fragment = case.build(tmp_path)
    if args[:2] in (["exp", "run"], ["trial", "run"]) and not bwrap_available():
        pytest.skip("bubblewrap cannot run here: exp run and trial run require it first")
    if name in AFTER:
        AFTER[name](tmp_path)
    before = _snapshot(tmp_path)
    started = time.monotonic()
    res = run_cli(args)
    took = time.monotonic() - started
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    assert res.code == 2, out
    assert _squash(where) in _squash(res.stderr), (where, res.stderr)
    assert _squash(fragment) in _squash(res.stderr), (fragment, res.stderr)
    assert _snapshot(tmp_path) == before, "something was written"
    if case.seconds is not None:
        assert took < case.seconds, f"refused after {took:.1f} s"


def test_the_same_arm_twice_in_compare_is_refused(tmp_path: Path) -> None:
    outcomes = _outcomes(tmp_path)
    res = run_cli(["exp", "compare", str(outcomes), "--a", "mini", "--b", "mini"])
    assert "Traceback" not in res.stdout + res.stderr
    assert res.code == 2, res.stderr
    assert "--a and --b both name arm 'mini'" in " ".join(res.stderr.split())
    assert run_cli(["exp", "compare", str(outcomes), "--a", "mini", "--b", "big"]).code == 0


def test_a_large_plan_runs_past_the_check_with_the_flag(tmp_path: Path) -> None:
    """``--allow-large-plan`` lifts the default limit (the ceiling stays): the same file that
    is refused without it loads and is checked by the next step instead."""
    from assay.errors import SuiteError
    from assay.suites.experiment import check_plan_size, load_experiment

    _bundle(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(EXPERIMENT.replace("repetitions: 1", "repetitions: 5001"))
    loaded = load_experiment(exp)
    with pytest.raises(SuiteError, match="10,002 trials"):
        check_plan_size(loaded)
    check_plan_size(loaded, allow_large_plan=True)  # no exception: the flag lifts the limit


def test_the_ceiling_holds_with_the_flag(tmp_path: Path) -> None:
    from assay.errors import SuiteError
    from assay.suites.experiment import load_experiment

    for i in range(3):
        make_bundle(tmp_path / "tasks" / f"t{i}", task_id=f"t{i}")
    arms = "".join(f"  arm{i}:\n    agent: nop\n" for i in range(40))
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: wide\ntasks: [tasks]\nrepetitions: 10000\narms:\n" + arms)
    with pytest.raises(SuiteError, match="over the ceiling of 1,000,000 trials"):
        load_experiment(exp)


def test_aliases_that_stay_small_still_load(tmp_path: Path) -> None:
    """Aliases are not refused as such: one model block shared by two arms loads, and the two
    arms get the same model."""
    from assay.suites.experiment import load_experiment

    _bundle(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: shared\ntasks: [tasks]\narms:\n  a:\n    agent: nop\n"
                   "    model: &m {name: m1, base_url_env: X}\n  b:\n    agent: nop\n"
                   "    model: *m\n")
    loaded = load_experiment(exp)
    assert loaded.spec.arms["a"].model == loaded.spec.arms["b"].model


@pytest.mark.parametrize("what", ["billion laughs", "60 MB"])
def test_the_real_entry_point_refuses_quickly(what: str, tmp_path: Path) -> None:
    """The same refusals through ``python -m assay`` (a subprocess, as a user runs it); the
    bound covers the interpreter's start-up on a loaded machine."""
    _bundle(tmp_path)
    exp = tmp_path / "experiment.yaml"
    if what == "billion laughs":
        exp.write_text(BILLION_LAUGHS + EXPERIMENT)
    else:
        with open(exp, "w") as fh:
            fh.write(EXPERIMENT)
            fh.write("# padding\n" * (60 * 1024 * 1024 // 10))
        assert exp.stat().st_size > 60 * 1024 * 1024 > EXPERIMENT_FILE_MAX_BYTES
    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here: exp run requires it first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_")}
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "assay", *_exp_run(exp, tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**env, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    assert "Traceback" not in res.stdout + res.stderr
    assert res.returncode == 2, res.stderr
    assert str(exp) in _squash(res.stderr) or _squash(str(exp)) in _squash(res.stderr)
    assert not (tmp_path / "run").exists()
    assert took < 30, f"refused after {took:.1f} s"


def test_paths_and_links_that_stay_inside_the_bundle_still_load(tmp_path: Path) -> None:
    """Confinement refuses what leaves the bundle, nothing else: a link inside the starting
    tree to a file beside it, a '..' that comes back inside, and an instruction reached
    through a link within the bundle all load."""
    from assay.suites.bundle import load_bundle

    b = _bundle(tmp_path)
    (b / "repo" / "src" / "calc" / "alias.py").symlink_to("__init__.py")
    (b / "docs").mkdir()
    (b / "docs" / "task.md").symlink_to("../instruction.md")
    _replace_in(b / "task.yaml", "instruction: instruction.md",
                "instruction: repo/../docs/task.md")
    loaded = load_bundle(b)
    assert loaded.instruction_path.read_text().startswith("# Fix `calc.add`")


def test_jobs_past_the_bound_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """``-j`` overrides ``concurrency`` and is held to the same bound."""
    _bundle(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(EXPERIMENT)
    before = _snapshot(tmp_path)
    res = run_cli([*_exp_run(exp, tmp_path), "-j", "100000"])
    assert "Traceback" not in res.stdout + res.stderr
    assert res.code == 2 and "1024" in res.stderr, res.stderr
    assert _snapshot(tmp_path) == before
