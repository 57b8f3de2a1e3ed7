"""Agent adapters: launch, wait, stop, collect. ``parse_agent`` maps a CLI name to one."""

from __future__ import annotations

from assay.agents.base import Agent, AgentContext, AgentRun
from assay.agents.codex import Codex
from assay.agents.mcode import MCode
from assay.agents.mutants import BY_NAME, MUTANTS, MutantAgent
from assay.agents.reference import Command, Nop, Oracle


def parse_agent(spec: str) -> Agent:
    """``oracle``, ``nop``, ``command:<shell command>``, ``mutant:<name>`` or ``mcode`` /
    ``mcode:<path to the CLI>``, ``codex`` / ``codex:<path>``."""
    if spec == "oracle":
        return Oracle()
    if spec == "nop":
        return Nop()
    if spec.startswith("command:"):
        cmd = spec.split(":", 1)[1].strip()
        if not cmd:
            raise ValueError("command: needs a shell command, e.g. command:'python3 agent.py'")
        return Command(cmd)
    if spec == "mcode" or spec.startswith("mcode:"):
        return MCode.from_spec(spec)
    if spec == "codex" or spec.startswith("codex:"):
        return Codex.from_spec(spec)
    if spec.startswith("mutant:"):
        name = spec.split(":", 1)[1]
        if name not in BY_NAME:
            raise ValueError(f"unknown mutant {name!r} (known: {', '.join(BY_NAME)})")
        return MutantAgent(BY_NAME[name])
    raise ValueError(f"unknown agent {spec!r}: use oracle, nop, command:<shell command>, "
                     "mutant:<name>, mcode[:<path>] or codex[:<path>]")


__all__ = ["MUTANTS", "Agent", "AgentContext", "AgentRun", "Codex", "MCode", "MutantAgent",
           "parse_agent"]
