"""The file references (docs/reference/{task,experiment,suite,recipe}.md) are generated from the
models that validate those files and must be current; every key says what it means; the example
each page shows is a real file of the repository that loads as it stands."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.suites.reference import PAGES, _sections, render

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_reference_page_is_current(page) -> None:
    path = REPO / "docs" / "reference" / f"{page.name}.md"
    assert path.read_text(encoding="utf-8") == render(page, REPO), (
        f"{path.relative_to(REPO)} is stale: run "
        ".venv/bin/python -m assay.suites.reference docs/reference")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_key_is_documented(page) -> None:
    missing = [f"{path or '(top)'}.{name}" for path, cls in _sections(page.model, "")
               for name, info in cls.model_fields.items() if not (info.description or "").strip()]
    assert not missing, missing


def test_the_examples_shown_load() -> None:
    from assay.suites.bundle import load_bundle
    from assay.suites.cases import load_suite
    from assay.suites.experiment import load_experiment
    from assay.suites.recipe import load_recipe

    examples = {p.name: REPO / p.example for p in PAGES}
    assert load_bundle(examples["task"].parent).spec.id == "duration-parse-001"
    assert load_experiment(examples["experiment"]).spec.name == "rehearsal"
    assert load_suite(examples["suite"].parent).cases
    assert "python3-pytest" in load_recipe(examples["recipe"])[0].packages


def test_a_page_shows_defaults_bounds_and_allowed_values() -> None:
    task = (REPO / "docs" / "reference" / "task.md").read_text(encoding="utf-8")
    assert "| `network_policy` | `Literal['none', 'model-proxy-only']` | `\"none\"` | " \
        "`\"none\"` \\| `\"model-proxy-only\"` |" in task
    assert "| `workspace_mib` | `int` | `1024` | ≥ 1 |" in task
    assert "| `acceptance` | `Acceptance` | **required** |" in task
