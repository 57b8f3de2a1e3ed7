"""Rendering of every HTML page: one Jinja environment, one base template with the shared CSS,
shared macros, and one way to write a number.

Exports:

- :func:`render` (``render("experiment.html.j2", page=..., v=...)``) and :func:`environment`;
- the number formats (:data:`NA`, :func:`pct`, :func:`num`, :func:`ci`, :func:`pct_ci`,
  :func:`pts`, :func:`pts_ci`, :func:`usd`, :func:`secs`, :func:`count`), also the
  environment's filters of the same names;
- :func:`interval_bar`, the geometry of the shared 0-100% bar with its interval.

The page modules (``report/html.py``, ``experiment_html.py``, ``history_html.py``,
``trial_html.py``) build a view of preformatted strings and plot geometry from a report dict and
hand it to :func:`render`; nothing here reads a run directory.
"""

from assay.report.render.bars import interval_bar
from assay.report.render.env import GENERATOR, environment, render
from assay.report.render.numbers import (
    NA,
    ci,
    count,
    num,
    pct,
    pct_ci,
    pts,
    pts_ci,
    secs,
    usd,
)

__all__ = ["GENERATOR", "NA", "ci", "count", "environment", "interval_bar", "num", "pct",
           "pct_ci", "pts", "pts_ci", "render", "secs", "usd"]
