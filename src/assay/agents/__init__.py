"""Agent adapters: launch, wait, stop, collect. ``parse_agent`` maps a CLI name to one."""

from __future__ import annotations

from assay.agents.base import Agent, AgentContext, AgentRun
from assay.agents.mutants import BY_NAME, MUTANTS, MutantAgent
from assay.agents.reference import Command, Nop, Oracle


def parse_agent(spec: str) -> Agent:
    """``oracle``, ``nop``, ``command:<shell command>`` or ``mutant:<name>``."""
    if spec == "oracle":
        return Oracle()
    if spec == "nop":
        return Nop()
    if spec.startswith("command:"):
        cmd = spec.split(":", 1)[1].strip()
        if not cmd:
            raise ValueError("command: needs a shell command, e.g. command:'python3 agent.py'")
        return Command(cmd)
    if spec.startswith("mutant:"):
        name = spec.split(":", 1)[1]
        if name not in BY_NAME:
            raise ValueError(f"unknown mutant {name!r} (known: {', '.join(BY_NAME)})")
        return MutantAgent(BY_NAME[name])
    raise ValueError(f"unknown agent {spec!r}: use oracle, nop, command:<shell command> or "
                     "mutant:<name>")


__all__ = ["MUTANTS", "Agent", "AgentContext", "AgentRun", "MutantAgent", "parse_agent"]
