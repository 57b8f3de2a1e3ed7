"""Writes the two rehearsal scripts of ``rehearsal.yaml`` from the example bundles' patches.

``builtin/replay`` plays the model: each turn is what the model answers, here one shell tool
call (in the agent's own tool name) that applies a patch, then a final message. The
*candidate* script applies every task's reference fix; the *baseline* applies it on three
tasks, the bundle's partial fix on two (the verifier must reject those) and nothing on one, so
the rehearsal shows a real Δ, new failures (none) and a verdict. Run it again after editing:

    python3 examples/experiments/make_replay.py [TOOL_NAME]   # default: run_shell_command
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TASKS = HERE.parent / "agent-tasks"
BASELINE = {"duration-parse-001": "solve", "semver-compat-002": "solve",
            "slugify-fold-003": "solve", "retry-final-004": "partial",
            "ellipsize-width-005": "partial", "memo-key-006": None}


def _block(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """Multi-line strings as literal blocks, so the patch reads as a patch."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


yaml.SafeDumper.add_representer(str, _block)


def _turns(tool: str, patch: str | None) -> list[dict]:
    if patch is None:
        return [{"message": "I read the code and I do not see a bug to fix."}]
    command = ("cat > .assay-fix.patch <<'ASSAY_PATCH_EOF'\n" + patch
               + "ASSAY_PATCH_EOF\ngit apply .assay-fix.patch && rm .assay-fix.patch")
    return [{"message": "I found the bug; applying the fix.",
             "tool_call": {"name": tool, "arguments": {"command": command}}}]


def main() -> None:
    tool = sys.argv[1] if len(sys.argv) > 1 else "run_shell_command"
    for arm in ("baseline", "candidate"):
        out = HERE / "replay" / arm
        out.mkdir(parents=True, exist_ok=True)
        for task in sorted(p.name for p in TASKS.iterdir() if (p / "task.yaml").is_file()):
            which = "solve" if arm == "candidate" else BASELINE[task]
            patch = None if which is None else (
                TASKS / task / "solution" / f"{which}.patch").read_text()
            script = {"turns": _turns(tool, patch), "final": "Done."}
            (out / f"{task}.yaml").write_text(
                f"# written by make_replay.py ({arm}: {which or 'no fix'})\n"
                + yaml.safe_dump(script, sort_keys=False, width=100))


if __name__ == "__main__":
    main()
