"""Each kind of HTML report opened in a real browser: Debian's headless Chromium (installed by
``make test`` through scripts/bootstrap.sh), driven over the DevTools protocol
(``support/cdp.py``). One browser for the module, one tab per page.

For the narrow report of the triage example, a coding report and the experiment report of the
hand-written dict: no console error, exception or dialog; the key elements are there and laid
out (non-zero boxes, nothing wider than the window); no request other than the file itself (each
one is observed and refused); a full-page screenshot that is a real PNG of real content. A
control page with a script and a remote image proves the same checks do catch those.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.bundles import make_bundle
from support.cdp import Browser, PageResult, chromium
from support.experiment_report import XSS, experiment_report
from support.layout_probe import LAYOUT_PROBE, WIDTHS, assert_reads

from assay.report.experiment_html import write_experiment_html
from assay.sandbox import bwrap_available

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1200
PROBE = """(() => {
  const q = s => document.querySelectorAll(s).length;
  const t = s => { const e = document.querySelector(s);
                   return e ? e.textContent.replace(/\\s+/g, ' ').trim() : null; };
  const box = s => { const e = document.querySelector(s); if (!e) return null;
                     const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  return {title: document.title, h1: t('h1'), scripts: q('script'), images: q('img'),
          svgs: q('svg'), scrollWidth: document.documentElement.scrollWidth,
          decision: t('#verdict .decision'), forestRows: q('svg.forest g.forest-row'),
          forestBox: box('svg.forest'), diamond: q('svg.forest polygon.diamond'),
          cost: t('#cost'), runtimeRows: q('svg.runtime g.runtime-row'),
          timeouts: q('svg.runtime path.timeout'), runtimeBox: box('svg.runtime'),
          holdout: t('#holdout .holdout-count'), taskRows: q('table.tasks tbody tr'),
          trialLinks: q('table.tasks a[href$="/trial.json"]'),
          hero: t('.tile.hero'), confusion: q('table.conf'), figures: q('table.ivs svg'),
          rubricRows: q('table.rubric-grades tbody tr'), rubricRound: t('#rubric-round'),
          body: document.body.textContent.replace(/\\s+/g, ' ')};
})()"""

CODING_TASKS = [
    {"id": "add", "type": "unit", "language": "python", "prompt": "Write add(a, b).",
     "tests": "assert add(2, 3) == 5\n", "solution": "def add(a, b):\n    return a + b\n"},
    {"id": XSS, "type": "unit", "language": "python", "prompt": "Write mul(a, b).",
     "tests": "assert mul(2, 3) == 6\n", "solution": "def mul(a, b):\n    return a * b\n"},
    {"id": "review", "type": "rubric", "prompt": "Write an index for orders by date.",
     "rubric": "3: covering index", "solution": "CREATE INDEX o ON orders (created_at);"},
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    exe = chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed (make test installs it: "
                    "ASSAY_BOOTSTRAP_BROWSER=1 scripts/bootstrap.sh)")
    b = Browser(exe, tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield b
    finally:
        b.close()


def png_facts(png: bytes) -> dict[str, Any]:
    """Width, height and the number of distinct pixel rows of a PNG, read by hand."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, head = 8, b"", None
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert head is not None, "no IHDR"
    width, height, depth, color = head[:4]
    channels = {2: 3, 6: 4, 0: 1, 4: 2}[color]
    raw = zlib.decompress(idat)
    stride = 1 + width * channels * depth // 8
    rows = {raw[i * stride + 1:(i + 1) * stride] for i in range(height)}
    return {"width": width, "height": height, "distinct_rows": len(rows)}


def check_page(res: PageResult, shot: Path) -> dict[str, Any]:
    """The checks every report page passes; returns the probe for the kind's own checks."""
    shot.write_bytes(res.png)
    assert res.errors == [], res.errors
    assert res.requests == [res.url], "a request other than the page itself"
    assert res.refused == []
    p = res.probe
    assert p["scripts"] == 0 and p["images"] == 0
    assert p["scrollWidth"] <= WIDTH, "the page is wider than the window"
    facts = png_facts(shot.read_bytes())
    assert facts["width"] == WIDTH and facts["height"] >= 900
    assert shot.stat().st_size > 20_000
    assert facts["distinct_rows"] > 100, "a blank or near-blank screenshot"
    return p


def check_widths(browser: Browser, page: Path, shots: Path, name: str) -> list[dict[str, Any]]:
    """The page at 800 and 1,400 px (``support/layout_probe.py``): nothing past the window's
    edge outside a scroll box, no SVG label cut off, no chip broken mid-word. The screenshots
    stay in the test's folder (``<name>-<width>.png``)."""
    probes = []
    for width in WIDTHS:
        res = browser.load(page, LAYOUT_PROBE, width=width)
        (shots / f"{name}-{width}.png").write_bytes(res.png)
        assert res.errors == [], res.errors
        assert png_facts(res.png)["width"] == width
        assert_reads(res.probe, f"{name} at {width} px")
        probes.append(res.probe)
    return probes


def test_the_layout_checks_catch_overflow_clipped_labels_and_broken_chips(
        browser: Browser, tmp_path: Path) -> None:
    """A control page at 800 px: a table wider than the window (not in a scroll box), an SVG
    label drawn past its plot's edge, a chip whose name breaks mid-word. Each is reported, so
    a report page that passes passes for a reason; the same table inside a scroll box is
    not."""
    page = tmp_path / "control.html"
    cells = "".join(f"<td>cell_{i}_wide_enough</td>" for i in range(12))
    page.write_text(
        '<!DOCTYPE html><html><head><title>c</title></head><body>'
        f'<table class="raw"><tr>{cells}</tr></table>'
        f'<div style="overflow-x:auto"><table class="boxed"><tr>{cells}</tr></table></div>'
        '<svg width="200" height="40"><text x="150" y="20">a label past the edge</text></svg>'
        '<ul class="chips" style="width:60px"><li style="overflow-wrap:anywhere">'
        'unreadable_label_name</li></ul></body></html>')
    p = browser.load(page, LAYOUT_PROBE, width=800).probe
    assert p["scrollWidth"] > 800
    assert any(w.startswith("table.raw ") for w in p["wide"]), p["wide"]
    assert not any(w.startswith("table.boxed ") for w in p["wide"]), p["wide"]
    assert p["clipped"] == ["a label past the edge"]
    assert p["broken"] == ["unreadable_label_name"]


def test_the_checks_catch_scripts_errors_and_requests(browser: Browser, tmp_path: Path) -> None:
    """A control page: a script that logs an error and throws, and a remote image. Each is seen
    (and the image's request refused), so a clean report page is clean for a reason."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><head><title>c</title></head><body><p>x</p>'
                    '<img src="http://assay-test.invalid/pixel.png">'
                    '<script>console.error("boom"); throw new Error("bad")</script></body></html>')
    res = browser.load(page, PROBE, width=WIDTH)
    assert res.requests == [res.url, "http://assay-test.invalid/pixel.png"]
    assert res.refused == ["http://assay-test.invalid/pixel.png"]
    assert any("console.error: boom" == e for e in res.errors)
    assert any(e.startswith("exception: Error: bad") for e in res.errors)
    assert any("ERR_BLOCKED_BY_CLIENT" in e for e in res.errors)
    assert res.probe["scripts"] == 1 and res.probe["images"] == 1


def test_narrow_report_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = run_cli(["run", str(ROOT / "examples" / "triage"), "--model", "builtin/baseline",
                   "--out", str(run)])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    p = check_page(browser.load(run / "report.html", PROBE, width=WIDTH),
                   tmp_path / "narrow.png")
    assert p["h1"] == f"{rep['suite']} × builtin/baseline"
    assert p["hero"].startswith("accuracy") and f"of {rep['n']} answers correct" in p["hero"]
    assert p["confusion"] == 1 and p["svgs"] >= 1
    narrow, _ = check_widths(browser, run / "report.html", tmp_path, "narrow")
    assert "wrong and invalid answers" in narrow["body"].lower() or narrow["svgTexts"] > 0


def test_coding_report_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in CODING_TASKS))
    run = tmp_path / "run"
    res = run_cli(["run", str(tasks), "--model", "builtin/oracle", "--sandbox", "none",
                   "--out", str(run)])
    assert res.code == 0, res.stderr
    # the rubric answer graded through the blind CSV, with a hostile note: assay grade
    # rebuilds the page, which then shows the grade, its round and the ungraded count
    sheet = tmp_path / "grades.csv"
    assert run_cli(["grade", str(run), "--export", str(sheet)]).code == 0
    header, row = sheet.read_text(encoding="utf-8-sig").splitlines()[:2]
    cells = row.split(",")
    cells[3], cells[4] = "1", '"' + XSS.replace('"', '""') + '"'
    sheet.write_text(header + "\n" + ",".join(cells) + "\n", encoding="utf-8")
    res = run_cli(["grade", str(run), "--import", str(sheet), "--grader", "ann"])
    assert res.code == 0 and "graded: 1" in res.stdout, res.stderr
    p = check_page(browser.load(run / "report.html", PROBE, width=WIDTH),
                   tmp_path / "coding.png")
    assert p["taskRows"] == len(CODING_TASKS)
    assert p["figures"] >= 1  # pass@1 with its interval bar
    assert XSS in p["body"]  # the hostile task id is text on the page
    n = json.loads((run / "report.json").read_text())["rubric"]["answers"]
    assert n >= 2 and p["rubricRows"] == n  # one graded, the others listed as ungraded
    assert f"0 of 1 graded pass, {n - 1} ungraded" in p["body"]
    # no task failed, but the ungraded rubric answers have no verdict: the page says what
    # waits, as the terminal and report.md do, never "every sample has a verdict"
    assert (f"None among the graded samples; {n - 1} rubric answers wait for human grading "
            "(assay grade).") in p["body"]
    assert "every sample has a verdict" not in p["body"]
    assert re.search(rf"Grades as of round \S+-ann \(latest\); {n - 1} answers still ungraded",
                     p["rubricRound"]), p["rubricRound"]


def test_experiment_report_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    rep = experiment_report()
    path = write_experiment_html(tmp_path, rep)
    p = check_page(browser.load(path, PROBE, width=WIDTH), tmp_path / "experiment.png")
    assert p["decision"] == "inconclusive"
    assert p["forestRows"] == len(rep["comparison"]["per_task"]) == 4
    assert p["diamond"] == 1
    assert p["forestBox"][0] > 500 and p["forestBox"][1] > 100
    assert "$0.2000" in p["cost"] and "≥ $0.1500" in p["cost"]
    assert p["runtimeRows"] == 2 and p["timeouts"] == 2
    assert p["runtimeBox"][0] > 500 and p["runtimeBox"][1] > 50
    assert "looked at 2 times" in p["holdout"] and "reused" in p["holdout"]
    assert p["taskRows"] == 5 and p["trialLinks"] == 21  # 18 graded + 3 ungraded attempts
    assert XSS in p["body"]
    # the forest plot keeps every label at both widths: four tasks, the overall row, notes
    for probe in check_widths(browser, path, tmp_path, "experiment"):
        assert probe["svgTexts"] >= 4 + 1 + 4


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_experiment_report_of_a_real_run_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    """The page `exp run` itself wrote (nop against oracle on three tasks: the fewest whose all
    fixed rules out a 5-point regression), not a hand-made dict: the verdict, one forest row per
    task and the links to each trial's record."""
    for i in range(3):
        make_bundle(tmp_path / "tasks" / f"t{i}", task_id=f"t{i}")
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: real\ntasks: [tasks]\narms:\n  base: {agent: nop}\n"
                   "  cand: {agent: oracle}\nbar: {hoped_improvement: 0.1, max_regression: 0.05}"
                   "\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 0, res.stderr
    p = check_page(browser.load(tmp_path / "run" / "report.html", PROBE, width=WIDTH),
                   tmp_path / "real-experiment.png")
    assert p["decision"] == "accept" and p["forestRows"] == 3 and p["diamond"] == 1
    assert p["trialLinks"] == 6
    check_widths(browser, tmp_path / "run" / "report.html", tmp_path, "real-experiment")
    # exp report tells its steps as they start (the CLI prints them on a run that takes more
    # than a few seconds): one count per trial page, then the page
    from assay.api.experiments import experiment_report

    steps: list[str] = []
    experiment_report(tmp_path / "run", progress=steps.append)
    assert steps[0] == "comparing 6 trials" and steps[-1] == "report.html"
    assert [s for s in steps if s.startswith("trial pages")] == [
        f"trial pages {i}/6" for i in range(1, 7)]
    for link in re.findall(r'href="(trials/[^"]+)"',
                           (tmp_path / "run" / "report.html").read_text()):
        assert (tmp_path / "run" / link).is_file(), link
