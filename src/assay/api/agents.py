"""The agent CLIs assay can drive, and the check that one works here (``assay agents check``):
install or find its pinned CLI and run one trial of it against the built-in scripted model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assay.runner.agents_check import CheckResult


def agent_names() -> list[str]:
    """Every agent CLI with a check recipe, registered in this build or not."""
    from assay.runner.agents_check import RECIPES

    return list(RECIPES)


def known_agents() -> list[str]:
    """The agent CLIs whose adapter is registered in this build (checked by default)."""
    from assay.runner.agents_check import known_agents as known

    return known()


def check_agent(name: str) -> CheckResult:
    """One trial of the agent ``name`` through the runner, gateway, sandbox and verifier;
    ``ok`` is None when its CLI could not be installed here."""
    from assay.runner.agents_check import check_agent as check

    return check(name)


__all__ = ["agent_names", "check_agent", "known_agents"]
