"""``assay history`` over a pile of real runs, as a nightly job would leave it.

Fifteen narrow runs of one small suite, every one made by the real CLI with ``--out-root``:
three against ``builtin/baseline``, three against ``builtin/oracle``, six against a scripted
OpenAI-compatible server whose served model id and system fingerprint change after the third
run while its accuracy drops from 10/10 to 5/10 (a known drop of 50 points), one baseline run
with a reworded prompt (a fingerprint change that is still comparable), and two oracle runs that
cannot be paired with the ones before (another scorer; another case file). Beside them a run
directory with a torn manifest and one written by a newer assay.

``history`` must group them by model, order them by time, name the changed fingerprints, start
new series where ``compare`` would refuse and say why, flag exactly the drop (by the paired
statistics of ``compare``) and the served-model change, flag nothing else, and list the broken
runs with their reasons. ``--fail-on-drift`` looks at the newest run of each series. The HTML
page is opened in headless Chromium. All in a few seconds: every run is a handful of cases.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SYSTEM_PROMPT, run_cli, write_suite
from support.cdp import Browser, chromium
from support.layout_probe import LAYOUT_PROBE, WIDTHS, assert_reads
from support.scripted_server import Answer, RecordedRequest, Reply, ScriptedServer

from assay.errors import EXIT_DRIFT

LABELS = ("bug", "feature", "question")
CASES = [(f"c{i:02d}", f"Issue {i}: " + ("crash on save" if i % 3 == 0 else
                                          "add dark mode" if i % 3 == 1 else
                                          "how do I export"), LABELS[i % 3]) for i in range(10)]
TRAIN = [("crash on save when disk full", "bug"), ("app crashes on save", "bug"),
         ("add dark mode please", "feature"), ("feature: add export to csv", "feature"),
         ("how do I export my data", "question"), ("how do I reset my password", "question")]
WRONG_AFTER = {"c01", "c03", "c05", "c07", "c09"}  # five of ten: accuracy 1.0 -> 0.5
OTHER = {"bug": "feature", "feature": "question", "question": "bug"}


def _suite(root: Path, *, prompt: str = SYSTEM_PROMPT, extra_yaml: str = "",
           cases: list[tuple[str, str, str]] = CASES) -> Path:
    labels = None if "scorer" in extra_yaml else LABELS  # labels belong to scorer label
    suite = write_suite(root / "mini", cases, labels=labels, prompt=prompt,
                        extra_yaml=extra_yaml)
    (suite / "data" / "train.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "input": t, "expected": e}) + "\n"
        for i, (t, e) in enumerate(TRAIN)))
    return suite


class Provider:
    """The scripted provider: right on every case, until it swaps the model behind the name."""

    def __init__(self) -> None:
        self.phase = 1
        self.expected = {text: label for _cid, text, label in CASES}
        self.ids = {text: cid for cid, text, _label in CASES}

    def __call__(self, request: RecordedRequest, attempt: int) -> Reply:
        text = request.case_input or ""
        label = self.expected.get(text, "bug")
        if self.phase == 2 and self.ids.get(text) in WRONG_AFTER:
            label = OTHER[label]
        served, fp = (("acme-large-2026-01", "fp_a1") if self.phase == 1
                      else ("acme-large-2026-02", "fp_b7"))
        return Answer(json.dumps({"label": label}), model=served, system_fingerprint=fp)


def _run(suite: Path, out_root: Path, model: str, env: dict[str, str] | None = None) -> None:
    res = run_cli(["run", str(suite), "--model", model, "--out-root", str(out_root)], env=env)
    assert res.code == 0, res.stderr


@pytest.fixture(scope="module")
def pile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("history")
    suite = _suite(tmp / "v1")
    runs = tmp / "runs"
    provider = Provider()
    with ScriptedServer(provider) as srv:
        env = {"MODEL_BASE_URL": srv.base_url, "MODEL_API_KEY": "sk-history-test"}
        for _ in range(3):
            _run(suite, runs, "builtin/baseline")
            _run(suite, runs, "builtin/oracle")
            _run(suite, runs, "acme-large", env)
        provider.phase = 2
        _run(suite, runs, "acme-large", env)
        partial = tmp / "partial"  # the pile as it stood the night of the drop
        shutil.copytree(runs, partial)
        for _ in range(2):
            _run(suite, runs, "acme-large", env)
    # a reworded prompt: a fingerprint that changes but stays comparable
    _run(_suite(tmp / "v2", prompt=SYSTEM_PROMPT + " Be brief."), runs, "builtin/baseline")
    # another scorer, then another case file: each starts a new series of the oracle
    _run(_suite(tmp / "v3", extra_yaml="scorer: normalized_text"), runs, "builtin/oracle")
    _run(_suite(tmp / "v4", extra_yaml="scorer: normalized_text", cases=CASES[:8]), runs,
         "builtin/oracle")
    torn = runs / "torn-run"
    torn.mkdir()
    (torn / "manifest.json").write_text('{"schema": "assay.narrow.manifest/1", "kind": "nar')
    newer = runs / "newer-run"
    newer.mkdir()
    first = sorted(runs.iterdir())[0]
    data = json.loads((first / "manifest.json").read_text())
    data["schema"] = "assay.narrow.manifest/99"
    (newer / "manifest.json").write_text(json.dumps(data))
    listed = runs / "list-manifest"
    listed.mkdir()
    (listed / "manifest.json").write_text("[1, 2, 3]")
    linked = runs / "linked-run"
    linked.mkdir()
    (linked / "manifest.json").symlink_to(first / "manifest.json")
    yield {"runs": runs, "partial": partial, "tmp": tmp}


def _history(*args: str) -> tuple[int, dict[str, Any]]:
    res = run_cli(["history", *args, "--json"])
    return res.code, json.loads(res.stdout)


def _group(h: dict[str, Any], who: str) -> dict[str, Any]:
    (g,) = [g for g in h["groups"] if g["who"] == who]
    return g


def _runs(g: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for s in g["series"] for r in s["runs"]]


def test_groups_orders_and_flags_only_the_drop(pile: dict[str, Any]) -> None:
    code, h = _history(str(pile["runs"]))
    assert code == 0
    assert h["drift_threshold"] == 0.0
    assert sorted(g["who"] for g in h["groups"]) == ["acme-large", "builtin/baseline",
                                                     "builtin/oracle"]
    acme = _group(h, "acme-large")
    runs = _runs(acme)
    assert len(acme["series"]) == 1 and len(runs) == 6
    times = [r["started_at"] for r in runs]
    assert times == sorted(times) and len(set(times)) == 6
    assert [r["headline"]["value"] for r in runs] == [1.0] * 3 + [0.5] * 3
    # the drop: found by compare's paired statistics on the ten shared cases, at run 4 only
    flagged = [i for i, r in enumerate(runs) if r["drift"] and r["drift"]["flagged"]]
    assert flagged == [3]
    d = runs[3]["drift"]
    assert d["delta"] == pytest.approx(-0.5) and d["paired"] == 10
    assert d["ci"][1] < 0 and d["direction"] == "down"
    assert d["from"] == runs[2]["dir"] and d["to"] == runs[3]["dir"]
    for r in runs[1:3] + runs[4:]:
        assert r["drift"]["delta"] == 0.0 and not r["drift"]["flagged"]
    # the served model behind the same name changed: reported on its own, at run 4 only
    changes = [i for i, r in enumerate(runs) if r["served_change"]]
    assert changes == [3]
    sc = runs[3]["served_change"]
    assert sc["requested"] == "acme-large"
    assert sc["served_models"] == {"before": ["acme-large-2026-01"],
                                   "after": ["acme-large-2026-02"]}
    assert sc["system_fingerprints"] == {"before": ["fp_a1"], "after": ["fp_b7"]}
    assert [c["dir"] for c in h["served_model_changes"]] == [runs[3]["dir"]]
    assert [f["dir"] for f in h["drift_flags"]] == [runs[3]["dir"]]
    # the same suite, prompt and scorer throughout: no fingerprint named as changed
    assert all(r["changed"] == [] for r in runs)


def test_builtins_are_steady_and_fingerprint_changes_are_named(pile: dict[str, Any]) -> None:
    _code, h = _history(str(pile["runs"]))
    base = _runs(_group(h, "builtin/baseline"))
    assert len(base) == 4 and len(_group(h, "builtin/baseline")["series"]) == 1
    assert [r["changed"] for r in base] == [[], [], [], ["prompt"]]
    assert all(not r["drift"]["flagged"] for r in base[1:])
    assert all(r["served_change"] is None for r in base)
    oracle = _group(h, "builtin/oracle")
    series = oracle["series"]
    assert [len(s["runs"]) for s in series] == [3, 1, 1]
    assert series[0]["started_because"] is None
    assert "another scorer" in series[1]["started_because"]
    assert "other cases" in series[2]["started_because"]
    assert "scorer" not in series[2]["started_because"]
    assert series[1]["runs"][0]["drift"] is None  # never paired across series
    # the oracle's fingerprint is made from the cases: it changes with them, at a series break,
    # where it is shown but not counted as a served-model change
    assert series[2]["runs"][0]["served_change"]["new_series"] is True
    assert all(r["served_change"] is None for s in series[:2] for r in s["runs"])
    assert "scorer" in series[1]["runs"][0]["changed"]
    assert [r["headline"]["value"] for s in series for r in s["runs"]] == [1.0] * 5
    assert not h["drift_flags"][1:]  # only the drop (checked above)


def test_unreadable_runs_are_listed_with_their_reason(pile: dict[str, Any]) -> None:
    code, h = _history(str(pile["runs"]), str(pile["tmp"] / "no-such-dir"))
    assert code == 0
    reasons = {Path(r["dir"]).name: r["problem"] for r in h["unreadable"]}
    assert set(reasons) == {"torn-run", "newer-run", "no-such-dir", "list-manifest",
                            "linked-run"}
    assert "expected a JSON object" in reasons["list-manifest"]
    assert "symbolic link" in reasons["linked-run"]
    assert "corrupt" in reasons["torn-run"]
    assert "99" in reasons["newer-run"] and "newer" in reasons["newer-run"]
    assert reasons["no-such-dir"] == "not a directory"
    res = run_cli(["history", str(pile["runs"])])  # the table, too, names them
    assert res.code == 0 and "torn-run" in res.stdout and "acme-large" in res.stdout


def test_fail_on_drift_looks_at_the_newest_run_of_each_series(pile: dict[str, Any]) -> None:
    res = run_cli(["history", str(pile["partial"]), "--fail-on-drift"])
    assert res.code == EXIT_DRIFT == 5, res.stderr
    assert "drift" in res.stderr
    # the closing line names the old and the new served model, each whole on one line
    assert ("served model changed under 'acme-large': served model acme-large-2026-01 → "
            "acme-large-2026-02; system fingerprint fp_a1 → fp_b7") in res.stdout
    assert "DRIFT -50.0 [" in res.stdout and "1 of " in res.stdout
    # two steady nights later the newest runs agree with the ones before them
    res = run_cli(["history", str(pile["runs"]), "--fail-on-drift"])
    assert res.code == 0, res.stderr
    # a threshold set beforehand: a 50-point drop whose interval does not reach past 60 points
    # below zero is not flagged, and the threshold is recorded; the served change still is
    code, h = _history(str(pile["partial"]), "--drift-threshold", "0.6")
    assert h["drift_threshold"] == 0.6 and h["drift_flags"] == []
    assert len(h["served_model_changes"]) == 1 and h["latest_alarms"]
    res = run_cli(["history", str(pile["partial"]), "--drift-threshold", "0.6",
                   "--fail-on-drift"])
    assert res.code == EXIT_DRIFT, "a served-model change alone fails the gate too"


def test_out_root_never_reuses_a_directory(pile: dict[str, Any]) -> None:
    names = sorted(p.name for p in pile["runs"].iterdir() if p.name.startswith("mini-"))
    assert len(names) == 15 and len(set(names)) == 15
    assert sum(n.startswith("mini-acme-large-") for n in names) == 6
    assert sum(n.startswith("mini-builtin_oracle-") for n in names) == 5
    out_root = pile["tmp"] / "again"
    res = run_cli(["run", str(pile["tmp"] / "v1" / "mini"), "--model", "builtin/oracle",
                   "--out-root", str(out_root), "--out", str(out_root / "x")])
    assert res.code == 2 and "--out-root" in res.stderr
    assert not (out_root / "x").exists()


PROBE = """(() => {
  const q = s => document.querySelectorAll(s).length;
  const titles = s => [...document.querySelectorAll(s)].map(e => e.textContent.trim());
  const box = s => { const e = document.querySelector(s); if (!e) return null;
                     const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  return {scripts: q('script'), images: q('img'), trends: q('svg.trend'),
          points: q('svg.trend circle.point'), bands: q('svg.trend polygon.band'),
          fpMarkers: titles('svg.trend line.fp-marker title'),
          served: titles('svg.trend polygon.served-marker title'),
          drift: titles('svg.trend circle.drift-marker title'),
          runs: q('table.runs tr.run'), trendBox: box('svg.trend'),
          scrollWidth: document.documentElement.scrollWidth,
          rule: document.querySelector('#drift-rule').textContent,
          captions: titles('table.runs caption'),
          heads: titles('table.runs thead th'),
          closing: titles('#closing, .served-closing'),
          wholes: q('.whole'),
          body: document.body.textContent.replace(/\\s+/g, ' ')};
})()"""


def test_html_page_in_chromium(pile: dict[str, Any], tmp_path: Path) -> None:
    exe = chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed (make test installs it: "
                    "ASSAY_BOOTSTRAP_BROWSER=1 scripts/bootstrap.sh)")
    page = tmp_path / "history.html"
    res = run_cli(["history", str(pile["runs"]), "--html", str(page)])
    assert res.code == 0, res.stderr
    b = Browser(exe, tmp_path / "profile")
    try:
        loaded = b.load(page, PROBE, width=1200)
        # at 800 and 1,400 px: nothing past the window outside a scroll box, no run name,
        # number or digest broken over lines (they are marked .whole), no plot label cut off
        for width in WIDTHS:
            res = b.load(page, LAYOUT_PROBE, width=width)
            (tmp_path / f"history-{width}.png").write_bytes(res.png)
            assert res.errors == [], res.errors
            assert_reads(res.probe, f"history at {width} px")
    finally:
        b.close()
    assert loaded.errors == [] and loaded.requests == [loaded.url] and loaded.refused == []
    p = loaded.probe
    assert p["scripts"] == 0 and p["images"] == 0 and p["scrollWidth"] <= 1200
    assert p["trends"] == 3 and p["points"] == p["runs"] == 15
    assert p["bands"] == 1 + 1 + 3  # a band per series: acme, baseline, oracle's three
    assert p["trendBox"][0] > 500 and p["trendBox"][1] > 100
    # (another scorer also drops the labels, which are part of the suite's fingerprint)
    assert sorted(p["fpMarkers"]) == ["changed: prompt", "changed: suite, scorer",
                                      "changed: suite, tasks"]
    assert len(p["served"]) == 1 and "acme-large-2026-02" in p["served"][0]
    assert len(p["drift"]) == 1 and p["drift"][0].startswith("drift -50.0 pts")
    assert p["rule"] == "a paired 95% interval that excludes zero"
    assert "threshold" not in p["body"]
    # the narrow table the terminal prints, a table per series captioned by what it is
    assert p["heads"][:4] == ["run", "headline [95% CI]", "served model", "drift vs run before"]
    assert len(p["captions"]) == 5 and p["wholes"] > 15 * 4
    assert all(c.startswith("series ") and " comparable runs: same " in c
               for c in p["captions"]), p["captions"]
    assert sum("began here: not comparable" in c and "another scorer" in c
               for c in p["captions"]) == 1
    # the closing lines: the rule, the count, and the served model before and after by name
    assert p["closing"][0].startswith("drift (a paired 95% interval that excludes zero): 1 of ")
    assert ("served model changed under 'acme-large': served model acme-large-2026-01 → "
            "acme-large-2026-02; system fingerprint fp_a1 → fp_b7") in p["closing"][1]
    assert "torn-run" in p["body"] and "another scorer" in p["body"]
    assert loaded.png[:8] == b"\x89PNG\r\n\x1a\n"


CODING_TASKS = [
    {"id": "add", "type": "unit", "language": "python", "prompt": "Write add(a, b).",
     "tests": "assert add(2, 3) == 5\n", "solution": "def add(a, b):\n    return a + b\n"},
    {"id": "mul", "type": "unit", "language": "python", "prompt": "Write mul(a, b).",
     "tests": "assert mul(2, 3) == 6\n", "solution": "def mul(a, b):\n    return a * b\n"},
]


def test_coding_runs_have_a_history_too(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in CODING_TASKS))
    runs = tmp_path / "runs"
    for _ in range(2):
        res = run_cli(["run", str(tasks), "--model", "builtin/oracle", "--sandbox", "none",
                       "--out-root", str(runs)])
        assert res.code == 0, res.stderr
    code, h = _history(str(runs))
    assert code == 0 and h["unreadable"] == []
    (g,) = h["groups"]
    assert g["kind"] == "coding" and g["who"] == "builtin/oracle"
    first, second = _runs(g)
    assert first["headline"]["name"] == "pass@1" and first["headline"]["value"] == 1.0
    assert second["drift"]["delta"] == 0.0 and not second["drift"]["flagged"]
    assert second["drift"]["unit"] == "task" and second["drift"]["paired"] == 2


def test_claimed_run_directories_never_collide(tmp_path: Path) -> None:
    """Two jobs in the same second: each gets its own, empty directory; a taken name is never
    handed out again, whatever it holds."""
    from assay.records.run_dirs import claim_run_dir, release_unused

    root = tmp_path / "nightly"
    a = claim_run_dir(root, "triage", "Qwen/Qwen2.5 7B", stamp="20261201T030000Z")
    b = claim_run_dir(root, "triage", "Qwen/Qwen2.5 7B", stamp="20261201T030000Z")
    (a / "manifest.json").write_text("{}")
    release_unused(a)  # not empty: kept
    release_unused(b)  # empty: removed, and its name is free again
    c = claim_run_dir(root, "triage", "Qwen/Qwen2.5 7B", stamp="20261201T030000Z")
    assert a.name == "triage-Qwen_Qwen2.5_7B-20261201T030000Z" and a.is_dir()
    assert b.name == c.name == "triage-Qwen_Qwen2.5_7B-20261201T030000Z-2"
    assert (a / "manifest.json").read_text() == "{}"
    d = claim_run_dir(root, "../../etc", "..", stamp="20261201T030000Z")
    assert d.parent == root and d.name == "etc-x-20261201T030000Z"


def test_a_run_with_no_answer_is_not_a_point(tmp_path: Path) -> None:
    """An endpoint that answers the first request (the reachability check) and then only
    503s: the run directory holds infra errors only. History names it as left out and draws
    no point for it; the runs with answers are read as before."""
    from support.scripted_server import Status

    suite = _suite(tmp_path)
    runs = tmp_path / "runs"
    _run(suite, runs, "builtin/oracle")
    with ScriptedServer(lambda request, attempt: Status(503)) as srv:
        env = {"MODEL_BASE_URL": srv.base_url, "MODEL_API_KEY": "sk-history-test"}
        res = run_cli(["run", str(suite), "--model", "builtin-less", "--max-tries", "1",
                       "--out-root", str(runs)], env=env)
    assert res.code == 3, res.stderr
    assert "no answer was recorded, so there is no report" in res.stderr
    assert "accuracy" not in res.stdout  # no report of zeros
    code, h = _history(str(runs))
    assert code == 0 and [g["who"] for g in h["groups"]] == ["builtin/oracle"]
    [empty] = h["without_answers"]
    assert Path(empty["dir"]).name.startswith("mini-builtin-less-")
    text = run_cli(["history", str(runs)])
    assert "left out, no answer recorded:" in text.stdout and "builtin-less" in text.stdout
