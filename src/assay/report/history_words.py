"""``assay history``'s figures as words: the same sentence in the terminal and on the page.

The terminal (``cli/history.py``) and the HTML page (``report/history_html.py``) both show a
run as its name, its headline with the interval, the served model and the drift from the run
before; a series by what its runs share; and close with the drift rule and any served-model
change, naming the old and the new model. Written once here, as plain text (each side escapes
for its own medium), so the two cannot drift into different words for the same number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: the CLI imports these words at start-up, the readers lazily
    from assay.report.history import HistoryRow
    from assay.report.history_series import Group, Series


def pct(x: float | None) -> str:
    """A rate as a percentage (n/a: unknown, never a zero)."""
    return "n/a" if x is None else f"{100 * x:.1f}%"


def headline_text(row: HistoryRow) -> str:
    """The headline as one cell: its name, value, 95% interval and how many it rests on."""
    h = row.get("headline")
    if not h:
        return "headline n/a"
    text = f"{h.get('name') or 'headline'} {pct(h.get('value'))}"
    ci = h.get("ci")
    if ci:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text + f" n={h.get('n')}"


def drift_text(row: HistoryRow) -> str:
    """The paired difference from the run before in points with its interval, or why it
    could not be paired; empty for a series' first run. Flagged or not is the caller's
    (``row['drift']['flagged']``)."""
    d = row.get("drift")
    if d is None:
        return ""
    if d.get("error"):
        return f"drift not paired: {d['error']}"
    lo, hi = d.get("ci") or (None, None)
    delta = d.get("delta")
    text = "n/a" if delta is None else f"{100 * delta:+.1f}"
    if lo is not None and hi is not None:
        text += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    return text + " pts vs before"


def served_text(row: HistoryRow) -> str:
    """The model ids the upstream said it served (not the name asked for)."""
    return "served " + (", ".join(row.get("served_models") or []) or "(not reported)")


def series_caption(group: Group, series: Series) -> tuple[str, list[str]]:
    """What a series is (runs that can be compared one after the other): a head, then cells
    saying what its runs share and, when it is not the group's first, why it began."""
    parts = series["runs"][0].get("comparable_parts") or {}
    head = f"series {series['index'] + 1} of {len(group['series'])}, comparable runs:"
    cells = [f"same {k} {str(v)[:7]}" for k, v in parts.items() if v]
    if series["started_because"]:
        cells.append("began here: " + series["started_because"])
    return head, cells


def drift_rule(threshold: float) -> str:
    """When a pair of consecutive runs counts as drift, in words (not "threshold 0")."""
    if threshold:
        return f"a paired 95% interval that excludes zero by more than {100 * threshold:g} pts"
    return "a paired 95% interval that excludes zero"


def served_words(change: dict[str, Any]) -> str:
    """A served-model change as a sentence: the name asked for, what served it before and
    after."""
    said = []
    for key, what in (("served_models", "served model"),
                      ("system_fingerprints", "system fingerprint")):
        pair = change.get(key)
        if pair:
            said.append(f"{what} {', '.join(pair['before'] or [])} → "
                        f"{', '.join(pair['after'] or [])}")
    return f"{change.get('requested')!r}: " + "; ".join(said)
