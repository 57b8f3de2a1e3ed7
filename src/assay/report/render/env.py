"""The one Jinja environment every HTML page of assay is rendered with.

One place decides what a page may contain: autoescaping on (every string from a run is data,
never markup), undefined names an error (a renamed view key fails the tests instead of printing
nothing), the same whitespace rules, and the number formats of :mod:`.numbers` as filters. The
templates live beside this module: ``base.html.j2`` (the document, the shared CSS of
``base.css``), ``macros.html.j2`` (the interval bar and the other shared pieces) and one
template per page that extends the base.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from assay.report.render import numbers

#: Each page's ``<meta name="generator">`` unless the page names a version (trial pages do, to
#: be drawn again by another version of assay).
GENERATOR = "assay"

FILTERS = {"pct": numbers.pct, "num": numbers.num, "ci": numbers.ci, "pct_ci": numbers.pct_ci,
           "pts": numbers.pts, "pts_ci": numbers.pts_ci, "usd": numbers.usd,
           "secs": numbers.secs, "count": numbers.count}


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("assay.report.render", "templates"),
                      autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(FILTERS)
    env.globals.update(na=numbers.NA, generator=GENERATOR)
    return env


def render(template: str, **context: Any) -> str:
    """The page ``template`` (a file name under ``templates/``) drawn with ``context``."""
    return environment().get_template(template).render(**context)


__all__ = ["GENERATOR", "environment", "render"]
