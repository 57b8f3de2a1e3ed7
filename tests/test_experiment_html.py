"""The experiment report page, drawn from the hand-written report dict in
``support/experiment_report.py`` (every figure worked out there by hand) and read back with the
standard library's HTML parser: the verdict and bar come first, the forest plot has a row per
task at the right place, unknown figures say "n/a", run text is escaped, links point at the
trials' records and nothing reaches outside the file."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from support.experiment_report import XFAM, XSS, experiment_report
from support.htmldom import Node, parse

from assay.report.experiment_html import render_experiment_html, trial_href, write_experiment_html
from assay.report.experiment_plots import forest, strip

XSS_Q = "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"  # XSS as one percent-encoded segment
SECTIONS = ["verdict", "forest", "pass-rates", "new-failures", "cost", "runtime", "coverage",
            "holdout", "tasks", "how"]


def page(rep: dict[str, Any] | None = None) -> tuple[str, Node]:
    html = render_experiment_html(rep if rep is not None else experiment_report())
    root = parse(html)
    assert_self_contained(html, root)
    return html, root


def assert_self_contained(html: str, root: Node) -> None:
    """No script, no external resource, no event handler, and every link either stays on the
    page or points into the run's own trials/ folder. (Run text may mention a URL: as text.)"""
    assert "<script" not in html.lower()
    (style,) = root.find_all("style")
    for needle in ("http:", "https:", "@import", "url(", "//"):
        assert needle not in style.text().lower(), needle
    for node in root.walk():
        assert node.tag not in {"script", "link", "img", "iframe", "object", "embed", "image",
                                "use", "base", "form"}, node.tag
        for name, value in node.attrs.items():
            assert not name.startswith("on"), f"event handler attribute {name}"
            assert not re.search(r"(https?|javascript|data|file):", value or "", re.I), value
            assert name not in ("src", "srcset", "action", "xlink:href", "data"), name
            if name == "href":
                assert (value or "").startswith(("#", "trials/")), value


def section(root: Node, ident: str) -> Node:
    return root.by_id(ident)


def test_sections_come_in_the_order_a_reviewer_reads() -> None:
    _, root = page()
    ids = [n.attrs["id"] for n in root.find("main").find_all("section")]
    assert ids == SECTIONS


def test_verdict_and_bar() -> None:
    _, root = page()
    v = section(root, "verdict")
    box = v.find("div", "verdict")
    assert "inconclusive" in box.classes
    assert box.find("div", "decision").text() == "inconclusive"
    assert [li.text() for li in box.find("ul", "reasons").find_all("li")] == \
        experiment_report()["verdict"]["reasons"]
    assert "About 40 tasks would be needed to detect the hoped improvement" in box.text()
    assert "no violation observed in this batch is not proof there are none" in box.text()
    rows = v.find("table", "checks").find("tbody").find_all("tr")
    got = [[td.text() for td in tr.find_all("td")] for tr in rows]
    # what a failed check does, in words (the terminal's), not a "hard" column or tag
    assert [th.text() for th in v.find("table", "checks").find_all("th")] == [
        "check", "want", "observed", "holds", "if it fails"]
    assert got == [
        ["integrity violations in cand", "0", "0", "ok", "reject"],
        ["lower bound above -max_regression", "> -2.0 pts", "-140.2 pts", "fails",
         "not accepted"],
        ["Δ reaches hoped improvement", ">= +5.0 pts", "+12.5 pts", "ok", "not accepted"],
        ["cost per completed task", "<= +20%", "-25% (lower bound)", "n/a", "not accepted"],
        ["new failures", "<= 2", "1", "ok", "not accepted"],
    ]
    assert [tr.attrs["class"] for tr in rows] == ["ok", "fails", "ok", "n/a", "ok"]
    bar = {tr.find_all("td")[0].text(): tr.find_all("td")[1].text()
           for tr in v.find("table", "bar").find_all("tr")}
    assert bar["hoped improvement"] == "+5.0 pts"
    assert bar["largest regression allowed (lower bound above)"] == "-2.0 pts"
    assert bar["cost per completed task"] == "+20% at most"
    assert bar["new failures allowed"] == "2" and bar["bar sha256"] == "ab" * 32


def test_forest_plot_geometry_by_hand() -> None:
    """Domain [-1, 1] always (a difference of two rates lies there): x(v) = 200 + (v + 1) / 2
    × 420. Zero at 410.0; XSS (+1) at 620.0; parse-date (+.5) at 515.0; tz-shift (-1) at
    200.0; Δ 0.125 at 436.2. The hand-written report's interval [-1.40, 1.65] (a plain t from
    before intervals were clipped) is drawn at the axis ends, 200.0 to 620.0, never by
    stretching the axis past ±100 points; ticks every 50 points."""
    _, root = page()
    sec = section(root, "forest")
    svg = sec.find("svg", "forest")
    rows = svg.find_all("g", "forest-row")
    assert [r.find("text").text() for r in rows] == [XSS, "fmt-money", "parse-date", "tz-shift"]
    centers = [float(r.find("rect", "point").attrs["x"]) + 7 for r in rows]  # side 14 (n 4)
    assert centers == pytest.approx([620.0, 410.0, 515.0, 200.0], abs=0.06)
    assert {r.find("rect", "point").attrs["width"] for r in rows} == {"14.0"}
    assert float(svg.find("line", "zero").attrs["x1"]) == 410.0
    overall = svg.find("g", "overall")
    ci = overall.find("line", "ci")
    assert (float(ci.attrs["x1"]), float(ci.attrs["x2"])) == (200.0, 620.0)
    pts = [tuple(map(float, p.split(","))) for p in
           overall.find("polygon", "diamond").attrs["points"].split()]
    assert [p[0] for p in pts] == [200.0, 436.2, 620.0, 436.2]
    ticks = [t.text() for t in svg.find_all("text") if re.fullmatch(r"[-+]?\d+", t.text())]
    assert ticks == ["-100", "-50", "0", "+50", "+100"]
    assert len(svg.find_all("line", "mark")) == 2  # the bar's hoped Δ and largest regression
    text = sec.text()
    assert "+12.5 pts" in text and "[-140.2 pts, +165.2 pts]" in text
    # the method's name and its clusters are a footnote, in "how these numbers were made"
    assert "¹ over 4 tasks" in text
    for word in ("cluster_t", "cluster", "MOVER", "degrees of freedom"):
        assert word not in text, word
    method = section(root, "how").find("p", "method").text()
    assert method.startswith("¹ The interval of Δ: t interval on cluster means (")
    assert "cluster_t" in method
    assert "over 4 tasks, resampled by family (3 groups)" in method
    assert "degrees of freedom 2" in method and "standard error 35.5 pts" in method
    assert [li.text() for li in sec.find("div", "cmp-notes").find_all("li")] == \
        ["1 task left out of Δ: no graded trial in cand"]
    # a row's note: p_a → p_b and its n
    assert "0.0% → 100.0% · n 2/2" in rows[0].text()


def test_pass_rates_cost_runtime_coverage_and_holdout() -> None:
    _, root = page()
    arms = {tr.find("b").text(): [td.text() for td in tr.find_all("td")]
            for tr in section(root, "pass-rates").find("tbody").find_all("tr")}
    wilson = " ² over graded trials"
    assert arms["base"][1:4] == ["6 / 10", "60.0%", "60.0%"]
    assert arms["base"][5] == "[31.3%, 83.2%]" + wilson
    assert "over graded trials, a Wilson interval" in \
        section(root, "how").find("p", "rates").text()
    assert arms["cand"][1:4] == ["6 / 8", "75.0%", "75.0%"]
    assert arms["cand"][5] == "[40.9%, 92.9%]" + wilson
    assert "tests_failed 4" in arms["base"][6] and "agent_timeout 2" in arms["cand"][6]
    whisker = section(root, "pass-rates").find_all("line", "whisker")
    assert [(float(w.attrs["x1"]), float(w.attrs["x2"])) for w in whisker] == \
        [(68.8, 183.0), (90.0, 204.3)]  # 220 px × the Wilson bounds

    new = section(root, "new-failures")
    assert [li.text() for li in new.find("ul", "groups").find_all("li")] == ["dates : tz-shift"]
    assert "1 task passes in base and fails in cand , by family" in new.text()
    integ = {tr.find("td").text(): [td.text() for td in tr.find_all("td")[1:]]
             for tr in new.find("table", "integrity").find("tbody").find_all("tr")}
    assert integ == {"base": ["0", "0"], "cand": ["0", "1"]}

    tiles = {t.find("div", "k").text(): t for t in section(root, "cost").find_all("div", "tile")}
    assert tiles["base"].find("div", "v").text() == "$0.2000"
    assert "complete" in tiles["base"].text() and "warn" not in tiles["base"].classes
    assert tiles["cand"].find("div", "v").text() == "≥ $0.1500"
    assert "lower bound" in tiles["cand"].text() and "warn" in tiles["cand"].classes
    assert "2 without usage" in tiles["cand"].text()
    assert "total $0.9000 over 11 attempts (failures included) / 6 accepted" in \
        tiles["cand"].text()

    run = section(root, "runtime")
    svg = run.find("svg", "runtime")
    rows = svg.find_all("g", "runtime-row")
    assert [len(r.find_all("line", "finish")) for r in rows] == [10, 8]
    assert [len(r.find_all("path", "timeout")) for r in rows] == [0, 2]
    # log axis 0.1 s .. 1000 s over 560 px from x 120: 600 s at 120 + 560 (log10 600 + 1) / 4
    kill = rows[1].find("path", "timeout").attrs["d"]
    x = float(re.match(r"M([\d.]+)", kill).group(1)) + 4
    assert x == pytest.approx(120 + 560 * (math.log10(600) + 1) / 4, abs=0.06)
    assert "logarithmic time axis" in run.text()
    lat = {tr.find("td").text(): [td.text() for td in tr.find_all("td")[1:]]
           for tr in run.find("table", "latency").find("tbody").find_all("tr")}
    assert lat["base"] == ["10", "0", "0.0%", "12.0 s / 45.0 s / 50.3 s", "8.8 s / 20.0 s / 20.0 s"]
    assert lat["cand"] == ["11", "2", "18.2%", "9.5 s / 16.0 s / 16.0 s",
                           "10.1 s / 16.0 s / 16.0 s"]
    assert "cand: 1 attempt with unknown runtime, not drawn." in run.text()

    cov = section(root, "coverage")
    assert cov.find("p", "coverage-line").text() == \
        "The estimate rests on 4 of 5 planned tasks ( 80.0% )."
    infra = {tr.find("td").text(): [td.text() for td in tr.find_all("td")[1:]]
             for tr in cov.find("table", "infra").find("tbody").find_all("tr")}
    assert infra["cand"] == ["10", "8", "80.0%", "11", "3", "27.3%", "0"]
    assert [[td.text() for td in tr.find_all("td")]
            for tr in cov.find("table", "left-out").find("tbody").find_all("tr")] == \
        [["slow-io", "money", "cand"]]

    hold = section(root, "holdout")
    assert "looked at 2 times (allowed: 1)" in hold.find("p", "holdout-count").text()
    assert hold.find("span", "reused").text() == "reused"
    assert len(hold.find("table", "looks").find("tbody").find_all("tr")) == 2


def test_task_rows_link_to_their_trials_records() -> None:
    _, root = page()
    rows = section(root, "tasks").find("table", "tasks").find("tbody").find_all("tr")
    assert [r.find("code").text() for r in rows] == [XSS, "fmt-money", "parse-date", "slow-io",
                                                     "tz-shift"]
    hrefs = {r.find("code").text(): [a.attrs["href"] for a in r.find_all("a")] for r in rows}
    assert hrefs[XSS] == [f"trials/{XSS_Q}/{arm}/{rep}/a0/trial.json"
                          for arm in ("base", "cand") for rep in (0, 1)]
    # a trial without a grade links every attempt it had
    assert hrefs["slow-io"] == ["trials/slow-io/base/0/a0/trial.json",
                                "trials/slow-io/base/1/a0/trial.json",
                                "trials/slow-io/cand/0/a0/trial.json",
                                "trials/slow-io/cand/0/a1/trial.json",
                                "trials/slow-io/cand/1/a0/trial.json"]
    slow = rows[3]
    assert "left out" in slow.text() and slow.find_all("td")[-1].text() == "n/a"
    assert [r.find_all("td")[1].text() for r in rows] == [XFAM, "money", "dates", "money",
                                                          "dates"]
    assert [td.text() for td in rows[4].find_all("td")][-1] == "-100.0 pts"
    assert "#0 failed: agent_timeout a0" in rows[4].text()
    # every trial of the plan is there: 5 tasks × 2 arms × 2 repetitions
    assert sum(len(r.find_all("li")) for r in rows) == 20


def test_trial_href_refuses_links_of_another_shape() -> None:
    assert trial_href("trials/t/arm/0/a1") == "trials/t/arm/0/a1/trial.json"
    assert trial_href(f"trials/{XSS}/a/0/a0") == f"trials/{XSS_Q}/a/0/a0/trial.json"
    assert trial_href("trials/a b?c#d/x/0/a0") == "trials/a%20b%3Fc%23d/x/0/a0/trial.json"
    for bad in (None, "", "trials/../x/0/a0", "trials/t/../../etc/a0", "trials/t/a/0",
                "javascript:alert(1)//x/y/z", "https://evil.example/t/a/0/a0",
                "/trials/t/a/0/a0", "trials/t/a/0/a0/extra", "trials/./a/0/a0",
                "trials/t\\..\\x/a/0/a0"):
        assert trial_href(bad) is None, bad


def test_hostile_names_are_text() -> None:
    rep = experiment_report()
    rep["name"] = "<script>alert('name')</script>"
    rep["trials"][0]["link"] = "trials/../../../etc/passwd"  # never a link out of trials/
    rep["trials"][1]["link"] = "javascript:alert(1)"
    rep["comparison"]["new_failures"] = {XFAM: [XSS]}
    rep["comparison"]["notes"] = ["<i>note</i> & more"]
    rep["verdict"]["reasons"] = ["<a href='https://x'>click</a>"]
    rep["holdout"]["by"][0]["who"] = "<b>who</b>"
    html, root = page(rep)
    assert root.find("h1").text() == "<script>alert('name')</script>"
    for raw in (XSS, XFAM, "<i>note</i>", "<a href='https", "<b>who</b>", "<script>"):
        assert raw not in html, raw
    for escaped in ("&lt;img src=x onerror=alert(1)&gt;", "&lt;b&gt;fam&lt;/b&gt;",
                    "&lt;i&gt;note&lt;/i&gt; &amp; more", "&lt;b&gt;who&lt;/b&gt;"):
        assert escaped in html, escaped
    assert section(root, "new-failures").find("ul", "groups").find("li").text() == \
        f"{XFAM} : {XSS}"
    first = section(root, "tasks").find("table", "tasks").find("tbody").find("tr")
    links = [a.attrs["href"] for a in first.find_all("a")]
    assert links == [f"trials/{XSS_Q}/cand/0/a0/trial.json",
                     f"trials/{XSS_Q}/cand/1/a0/trial.json"]
    assert "passwd" in first.text()  # the refused link is still shown, as text


def _unknown_report() -> dict[str, Any]:
    """Nothing graded, nothing priced, nothing compared, no bar, no holdout."""
    rep = experiment_report()
    for a in rep["arms"].values():
        a.update(graded=0, accepted=0, coverage=None, pass_rate_of_graded=None,
                 pass_rate_ci=None, failure_codes={}, infra_error_rate=None, cost_usd=None,
                 cost_complete=False, calls=0, attempts=0, infra_error_attempts=0)
    for t in rep["trials"]:
        t.update(state="pending", accepted=None, failure_code=None, attempts=[], link=None)
    rep.update(comparison=None, bar=None, verdict=None, holdout=None)
    return rep


def test_unknown_figures_say_na_never_zero() -> None:
    html, root = page(_unknown_report())
    v = section(root, "verdict")
    assert v.find("div", "decision").text() == "no verdict: no bar in the experiment file"
    assert not v.find_all("table")
    assert "No comparison" in section(root, "forest").text()
    assert not root.find_all("svg", "forest")
    arms = section(root, "pass-rates").find("tbody").find_all("tr")
    for tr in arms:
        cells = [td.text() for td in tr.find_all("td")]
        assert cells[2:5] == ["n/a", "n/a", "n/a"]
    tiles = section(root, "cost").find_all("div", "tile")
    assert [t.find("div", "v").text() for t in tiles] == ["n/a", "n/a"]
    assert all("no usage recorded" in t.text() for t in tiles)
    infra = section(root, "coverage").find("table", "infra").find("tbody").find_all("tr")
    assert [[td.text() for td in tr.find_all("td")][3] for tr in infra] == ["n/a", "n/a"]
    assert [[td.text() for td in tr.find_all("td")][6] for tr in infra] == ["n/a", "n/a"]
    assert "No holdout task in this run" in section(root, "holdout").text()
    rows = section(root, "tasks").find("table", "tasks").find("tbody").find_all("tr")
    assert {td.text() for r in rows for td in r.find_all("td")[-1:]} == {"n/a"}
    assert not section(root, "tasks").find_all("a")
    for zero in ("0.0%", "$0.0000", "+0.0 pts"):
        assert zero not in html, zero


def test_no_verdict_reasons_and_cost_not_computable() -> None:
    rep = experiment_report()
    rep["verdict"] = None
    _, root = page(rep)
    assert section(root, "verdict").find("div", "decision").text() == \
        "no verdict: no decision was recorded"
    rep["comparison"] = None
    _, root = page(rep)
    assert section(root, "verdict").find("div", "decision").text() == \
        "no verdict: the arms to compare are not known"
    # arms' own totals still show without a comparison, and runtimes come from the trials
    tiles = {t.find("div", "k").text(): t for t in section(root, "cost").find_all("div", "tile")}
    assert "total $1.2000" in tiles["base"].text()
    assert [len(r.find_all("path", "timeout")) for r in
            section(root, "runtime").find_all("g", "runtime-row")] == [0, 2]

    rep = experiment_report()
    rep["comparison"]["cost"]["cand"].update(per_completed_usd=None, accepted=0,
                                             status="not_computable")
    rep["verdict"]["decision"] = "reject"
    _, root = page(rep)
    tiles = {t.find("div", "k").text(): t for t in section(root, "cost").find_all("div", "tile")}
    assert tiles["cand"].find("div", "v").text() == "not computable"
    assert "no accepted trial" in tiles["cand"].text()
    assert "reject" in section(root, "verdict").find("div", "verdict").classes


def test_write_is_atomic_and_replaces(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("old")
    path = write_experiment_html(tmp_path, experiment_report())
    assert path == tmp_path / "report.html"
    assert path.read_text() == render_experiment_html(experiment_report())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temp file left


def test_schema_is_checked() -> None:
    with pytest.raises(ValueError, match="assay.experiment.report/2"):
        render_experiment_html({**experiment_report(), "schema": "assay.experiment.report/1"})


def test_plot_helpers_by_hand() -> None:
    f = forest([{"task": "t", "n_a": 1, "n_b": 1, "diff": 0.5},
                {"task": "u", "n_a": 4, "n_b": 4, "diff": None}], None, None, [])
    # domain [-1, 1]: x(v) = 200 + (v + 1) / 2 × 420
    assert f["zero_x"] == 410.0 and f["rows"][0]["x"] == 515.0 and f["rows"][1]["x"] is None
    assert f["rows"][0]["side"] == round(5 + 9 * math.sqrt(2 / 8), 1) == 9.5
    assert f["diamond"] is None
    s = strip([{"arm": "a", "seconds": [2.0, 4.0, None], "timed_out": [False, True, False]}])
    # max 4 → axis 0..5 s, linear (spread below 20×): x(v) = 120 + v / 5 × 560
    assert s["log"] is False and s["top"] == 5.0
    assert [(m["x"], m["timed_out"]) for m in s["rows"][0]["marks"]] == \
        [(344.0, False), (568.0, True)]
    assert s["rows"][0]["unknown"] == 1


def test_task_weighted_rates_censored_percentiles_and_notes() -> None:
    """The shape `exp report` writes on top of the minimum: each compared arm's task-weighted
    pass rate with its interval over clusters, percentiles that fall on a killed attempt
    (censored), report-level notes, a subgroup view, new failures clustered by task."""
    rep = experiment_report()
    # base over the compared tasks: (0 + 1 + .5 + 1) / 4 = 62.5%; cand (1 + 1 + 1 + 0) / 4 = 75%
    rep["arms"]["base"].update(pass_rate=0.625, pass_rate_ci=[0.0, 1.0])
    rep["arms"]["cand"].update(pass_rate=0.75, pass_rate_ci=[0.0, 1.0])
    lat = rep["comparison"]["latency"]["cand"]
    lat["all"] = {"p50": 10.1, "p90": None, "max": None, "censored": ["p90", "max"]}
    rep["notes"] = ["no holdout <split> in this bundle"]
    rep["comparison"]["subgroup"] = "triggered"
    rep["comparison"]["notes"].append("a subgroup view: selection bias")
    rep["comparison"]["new_failures"] = {"tz-shift": ["tz-shift"]}
    rep["comparison"]["cluster_by"] = "task"
    _, root = page(rep)
    arms = {tr.find("b").text(): [td.text() for td in tr.find_all("td")]
            for tr in section(root, "pass-rates").find("tbody").find_all("tr")}
    how = " ² each compared task weighted the same"
    assert arms["base"][2:4] == ["60.0%", "62.5%"] and arms["base"][5] == "[0.0%, 100.0%]" + how
    assert "cluster" not in section(root, "pass-rates").text()
    rates = section(root, "how").find("p", "rates").text()
    assert "each compared task weighted the same, a t interval over the tasks" in rates
    assert arms["cand"][2:4] == ["75.0%", "75.0%"]
    lat_rows = {tr.find("td").text(): [td.text() for td in tr.find_all("td")[1:]]
                for tr in section(root, "runtime").find("table", "latency").find_all("tr")[1:]}
    assert lat_rows["cand"][3] == "10.1 s / censored / censored"
    assert "whose runtime is unknown" in section(root, "runtime").text()
    assert "no holdout <split> in this bundle" in section(root, "verdict").text()
    box = section(root, "forest").find("div", "cmp-notes")
    assert box.text().startswith("Subgroup view (triggered): not the effect of the change.")
    new = section(root, "new-failures")
    assert [li.text() for li in new.find("ul", "groups").find_all("li")] == ["tz-shift"]
    assert "by task" not in new.text()


def test_version_record_and_short_runtimes() -> None:
    """The manifest's ``assay`` entry as `exp run` records it (a dict), and runtimes under a
    second in milliseconds rather than "0.0 s"."""
    rep = experiment_report()
    rep["manifest"]["assay"] = {"version": "0.1.0", "git_commit": "0123456789abcdef",
                                "git_dirty": True, "python": "3.11.7"}
    rep["comparison"]["latency"]["base"]["all"] = {"p50": 0.025, "p90": 0.035, "max": 1.5}
    _, root = page(rep)
    assert "assay 0.1.0 (0123456789ab, dirty)" in root.find("p", "meta").text()
    row = section(root, "runtime").find("table", "latency").find_all("tr")[1]
    assert [td.text() for td in row.find_all("td")][4] == "25 ms / 35 ms / 1.5 s"


def test_the_mechanism_table_only_for_a_run_that_watches_for_one() -> None:
    """The "Mechanism triggered" table counts trials whose agent stream held an arm's
    ``trigger_event``. A run with no trigger_event (the hand-written report: every trial
    unknown) draws no such table; one whose arm watches for ``compaction`` does, with its
    counts."""
    _, root = page()
    assert root.find_all("table", "triggered") == []
    assert "Mechanism triggered" not in section(root, "new-failures").text()
    rep = experiment_report()
    rep["comparison"]["triggered"] = {"base": {"triggered": 0, "not_triggered": 0, "unknown": 10},
                                      "cand": {"triggered": 5, "not_triggered": 3, "unknown": 0}}
    _, root = page(rep)
    rows = root.find("table", "triggered").find("tbody").find_all("tr")
    assert [[td.text() for td in tr.find_all("td")] for tr in rows] == [
        ["base", "0", "0", "10"], ["cand", "5", "3", "0"]]
