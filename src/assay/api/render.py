"""The printed forms of what the API returns: Markdown and terminal tables of reports,
comparisons, verdicts and preferences.

The CLI prints these and nothing else of the report package: a caller who wants the same text
as ``assay exp compare`` (a notebook cell, a bot's comment) gets it from here, built from the
same dict the API returned. Each is re-exported from the module under ``assay.report`` that
owns it, so there is one renderer per document.
"""

from __future__ import annotations

from assay.report.abcompare import preference_markdown
from assay.report.coding_markdown import NOT_ISOLATED, coding_markdown
from assay.report.compare_coding import compare_coding_markdown
from assay.report.compare_narrow import compare_markdown
from assay.report.experiment import comparison_markdown, experiment_markdown, verdict_markdown
from assay.report.holdout import reused_banner
from assay.report.noise_floor import noise_floor_markdown
from assay.report.render_narrow import print_report as print_narrow_report
from assay.report.sequential import looks_markdown
from assay.report.tool_calls import call_lines, call_view, without_echo

__all__ = ["NOT_ISOLATED", "call_lines", "call_view", "coding_markdown",
           "compare_coding_markdown", "compare_markdown", "comparison_markdown",
           "experiment_markdown", "looks_markdown", "noise_floor_markdown",
           "preference_markdown", "print_narrow_report", "reused_banner", "verdict_markdown",
           "without_echo"]
