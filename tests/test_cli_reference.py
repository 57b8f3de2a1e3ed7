"""The command-line reference (docs/reference/cli.md) is generated from the Typer app and must be
current: a new command, option, default or help text changes the page, and this test fails
until the page is regenerated. It also checks that the page leaves nothing of the app out."""

from __future__ import annotations

import re
from pathlib import Path

from assay.cli.reference import REGENERATE, render, root_command, usage, walk

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/reference/cli.md is stale: run {REGENERATE}")


def _sections(text: str) -> dict[str, str]:
    """Each command's section of the page, by its heading's words."""
    parts = re.split(r"^## `(assay[^`]*)`\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_command_and_option_is_on_the_page() -> None:
    sections = _sections(render())
    leaves = 0
    for path, cmd in list(walk(root_command()))[1:]:
        name = " ".join(("assay", *path))
        assert name in sections, f"{name} has no section"
        section = sections[name]
        if hasattr(cmd, "commands"):
            assert all(f"[`{sub}`]" in section for sub in cmd.commands), name
            continue
        leaves += 1
        assert f"```\n{usage(path, cmd)}\n```" in section
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                for flag in (*param.opts, *param.secondary_opts):
                    assert f"`{flag}`" in section, f"{name}: {flag} missing"
    # every command a user types, and no more: a page that lost its walk would pass the loop
    assert leaves == len(re.findall(r"^\| \[`assay ", render(), flags=re.M)) >= 20


def test_the_page_shows_defaults_bounds_and_required() -> None:
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    run = sections["assay run"]
    assert "| `-j` / `--concurrency` | integer, ≥ 1 | `16` |" in run
    assert "| `--fail-under` | number, ≥ 0, ≤ 1 | - |" in run
    assert "| `SUITE` | path | **required** |" in run
    assert "| `--out` | path | **required** |" in sections["assay trial run"]
    assert "| `-j` / `--jobs` | integer, ≥ 1, ≤ 1024 | - |" in sections["assay exp run"]
    assert "| `--no-regrade` / `--regrade` | flag | `--no-regrade` |" in sections["assay grade"]
    assert "```\nassay judge pairwise [OPTIONS] RUN_A [RUN_B]\n```" in \
        sections["assay judge pairwise"]
