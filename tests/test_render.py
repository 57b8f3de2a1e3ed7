"""report/render: one Jinja environment, one base template with the shared CSS, shared macros and
one way to write a number, used by every HTML page (issue 24).

The pages themselves are checked by their own tests (test_html_report, test_experiment_html,
test_history, test_trial_view, test_browser_reports); this file checks the shared room: that no
page builds an environment of its own, that every page extends the base, that the CSS reaches the
page as CSS (the trial pages once had ``&#34;`` in their font lists, which a browser drops), and
the number formats and bar geometry every page shares.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from assay.report import render as R
from assay.report.render import environment, interval_bar, render
from assay.report.render.numbers import NA, count, pct, pct_ci, pts, pts_ci, secs, usd

SRC = Path(__file__).resolve().parents[1] / "src" / "assay"
TEMPLATES = SRC / "report" / "render" / "templates"
PAGES = ["report.html.j2", "experiment.html.j2", "history.html.j2", "trial.html.j2",
         "trial_compare.html.j2"]


def test_one_jinja_environment_in_the_package() -> None:
    """Only render/env.py imports jinja2; every other module renders through it."""
    importers = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "jinja2" or n.startswith("jinja2.") for n in names):
                importers.append(str(path.relative_to(SRC)))
    assert importers == ["report/render/env.py"]
    assert environment() is environment()  # built once


def test_every_page_extends_the_base_and_no_template_is_orphaned() -> None:
    names = sorted(p.name for p in TEMPLATES.iterdir())
    assert names == sorted([*PAGES, "base.html.j2", "base.css", "macros.html.j2", "trial.css",
                            "trial_steps.html.j2"])
    for page in PAGES:
        text = (TEMPLATES / page).read_text(encoding="utf-8")
        assert '{% extends "base.html.j2" %}' in text, page
        assert "<!DOCTYPE" not in text and "<style>" not in text, page
    base_rules = {line for line in (TEMPLATES / "base.css").read_text().splitlines()
                  if line.endswith("}") and not line.startswith(" ")}
    for page in PAGES:  # a shared rule lives in base.css only
        text = (TEMPLATES / page).read_text(encoding="utf-8")
        assert not [r for r in base_rules if r in text.splitlines()], page
    trial_css = (TEMPLATES / "trial.css").read_text().splitlines()
    assert not base_rules & set(trial_css)


@pytest.mark.parametrize("page", PAGES)
def test_the_css_reaches_each_page_unescaped(page: str) -> None:
    template = environment().get_template(page)
    context = template.new_context({})
    css = "".join(template.blocks["style"](context))
    base = "".join(template.environment.get_template("base.css").generate())
    assert "&#34;" not in css + base and "&quot;" not in css + base
    assert 'font:15px/1.5 system-ui,-apple-system,"Segoe UI"' in base


def test_a_page_is_one_document_with_the_shared_css_and_its_generator() -> None:
    from assay.report.history_html import render_history_html

    html = render_history_html({"groups": [], "roots": ["runs/<b>"], "drift_threshold": 0.05,
                                "drift_rule": "paired", "drift_flags": [],
                                "served_model_changes": [], "latest_alarms": [],
                                "unreadable": [{"dir": "<script>alert(1)</script>",
                                                "problem": "torn"}]})
    assert html.startswith("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n")
    assert html.count("<style>") == 1 and html.count("<html") == 1
    style = html.split("<style>\n", 1)[1].split("</style>", 1)[0]
    assert style.startswith((TEMPLATES / "base.css").read_text(encoding="utf-8"))
    assert "body{font-size:14px}" in style  # the page's own rules after the shared ones
    assert '<meta name="generator" content="assay">' in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "runs/&lt;b&gt;" in html
    assert html.endswith("</main>\n</body>\n</html>\n")


def test_the_interval_bar_macro_draws_the_shared_geometry() -> None:
    macros = environment().get_template("macros.html.j2").module
    svg = str(macros.interval_bar(interval_bar(0.5, 0.25, 1.2, width=200), "rate <50%>",
                                  axis=True))
    assert 'aria-label="rate &lt;50%&gt;"' in svg
    whisker = re.search(r'<line class="whisker" x1="([\d.]+)" x2="([\d.]+)"', svg)
    assert whisker and (whisker[1], whisker[2]) == ("50.0", "200.0")  # clipped to the axis
    assert svg.count('stroke="#ffffff"') == 3 and ">100%</text>" in svg
    no_interval = str(macros.interval_bar(interval_bar(0.5, None, 0.9), "x"))
    assert 'class="whisker"' not in no_interval and "100%" not in no_interval
    assert str(macros.interval_bar(None, "x")) == '<span class="na">n/a</span>'
    assert str(macros.value(NA)) == '<span class="num na">n/a</span>'
    assert str(macros.value("12.0%")) == '<span class="num">12.0%</span>'


def test_numbers_print_unknown_as_na_never_zero() -> None:
    assert [pct(None), pct(0.0), pct(0.4256), pct(None, missing="—")] == \
        ["n/a", "0.0%", "42.6%", "—"]
    assert [pts(None), pts(0.125), pts(-0.05), pts(0.0)] == \
        ["n/a", "+12.5 pts", "-5.0 pts", "+0.0 pts"]
    assert [pct_ci(None), pct_ci([0.1, None]), pct_ci([0.1, 0.25])] == \
        ["n/a", "n/a", "[10.0%, 25.0%]"]
    assert [pts_ci([None, 0.1]), pts_ci([-0.1, 0.2])] == ["n/a", "[-10.0 pts, +20.0 pts]"]
    assert [usd(None), usd(0.0), usd(0.01234), usd(1234.5)] == \
        ["n/a", "$0.0000", "$0.0123", "$1,234.50"]
    assert [secs(None), secs(0.25), secs(12.34), secs(600)] == \
        ["n/a", "250 ms", "12.3 s", "10.0 min"]
    assert [count(None), count(0), count(3, " s"), count(None, missing="—")] == \
        ["n/a", "0", "3 s", "—"]
    assert R.num(None) == "n/a" and R.num(12345.678, 1) == "12,345.7"
    assert R.ci([0.1, 0.2]) == "[10.0%, 20.0%]" and R.ci(None) == "n/a"
    env = environment()
    for name in ("pct", "num", "ci", "pct_ci", "pts", "pts_ci", "usd", "secs", "count"):
        assert env.filters[name] is getattr(R, name)
    assert env.from_string("{{ x|pct }} {{ y|count }} {{ z|pts }}").render(
        x=None, y=0, z=0.5) == "n/a 0 +50.0 pts"


def test_the_bar_geometry() -> None:
    assert interval_bar(None) is None
    assert interval_bar(0.5) == {"w": 240, "x": 120.0, "lo": None, "hi": None}
    assert interval_bar(-0.2, -1, 2, width=100) == {"w": 100, "x": 0.0, "lo": 0.0, "hi": 100.0}


def test_render_refuses_an_unknown_view_key() -> None:
    """StrictUndefined: a renamed key in a view fails loudly instead of printing nothing."""
    from jinja2 import UndefinedError

    with pytest.raises(UndefinedError):
        render("history.html.j2", h={})
