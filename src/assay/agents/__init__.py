"""Agent adapters: launch, wait, stop, collect. ``parse_agent`` maps a CLI name to one."""

from __future__ import annotations

from assay.agents.base import Agent, AgentContext, AgentRun
from assay.agents.claude.adapter import ClaudeCode
from assay.agents.codex.adapter import Codex
from assay.agents.mcode.adapter import MCode
from assay.agents.mini_swe_agent.adapter import MiniSweAgent
from assay.agents.mutants import BY_NAME, MUTANTS, MutantAgent
from assay.agents.qwen.adapter import Qwen
from assay.agents.reference import Command, Nop, Oracle


def parse_agent(spec: str) -> Agent:
    """``oracle``, ``nop``, ``command:<shell command>``, ``mutant:<name>``, or a real agent
    CLI's adapter (``mcode``, ``codex``, ``claude-code``, ``qwen-code``, ``mini-swe-agent``),
    each optionally ``:<path to the CLI>``."""
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
    if spec == "mini-swe-agent" or spec.startswith("mini-swe-agent:"):
        return MiniSweAgent.from_spec(spec)
    # the issue names it claude-code; the CLI is called claude: both name the adapter
    if spec in ("claude", "claude-code") or spec.startswith(("claude:", "claude-code:")):
        return ClaudeCode.from_spec(spec)
    # the issue names it qwen-code; the CLI is called qwen: both name the adapter
    if spec in ("qwen", "qwen-code") or spec.startswith(("qwen:", "qwen-code:")):
        return Qwen.from_spec(spec)
    if spec == "codex" or spec.startswith("codex:"):
        return Codex.from_spec(spec)
    if spec.startswith("mutant:"):
        name = spec.split(":", 1)[1]
        if name not in BY_NAME:
            raise ValueError(f"unknown mutant {name!r} (known: {', '.join(BY_NAME)})")
        return MutantAgent(BY_NAME[name])
    raise ValueError(f"unknown agent {spec!r}: use oracle, nop, command:<shell command>, "
                     "mutant:<name>, or a CLI adapter (mcode, codex, claude-code, qwen-code, "
                     "mini-swe-agent), optionally :<path to its CLI>")


__all__ = ["MUTANTS", "Agent", "AgentContext", "AgentRun", "ClaudeCode", "Codex", "MCode",
           "MiniSweAgent", "MutantAgent", "Qwen",
           "parse_agent"]
