"""A whole `command:` agent: the OpenAI client, one shell tool, a loop. Copy it and change it.

assay runs it in the task's workspace, in the sandbox, with the gateway's variables set:
OPENAI_BASE_URL and OPENAI_API_KEY (a token scoped to this attempt, never the real key),
ASSAY_MODEL, ASSAY_MODEL_PARAMS (the arm's params, JSON) and ASSAY_INSTRUCTION_FILE.

The OpenAI client comes from ./vendor beside this file when it is there (the sandbox has the
system's python3 only): python3 -m pip install --target examples/agents/vendor openai
"""

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "vendor"))
from openai import OpenAI  # noqa: E402

TOOL = {"type": "function", "function": {
    "name": "run_shell_command", "description": "Run a shell command in the repository.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
MAX_STEPS = 20


def main() -> int:
    client = OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY
    params = json.loads(os.environ.get("ASSAY_MODEL_PARAMS") or "{}")
    task = Path(os.environ["ASSAY_INSTRUCTION_FILE"]).read_text()
    messages = [{"role": "system", "content": "Fix the task with the shell tool, then stop."},
                {"role": "user", "content": task}]
    for step in range(1, MAX_STEPS + 1):
        reply = client.chat.completions.create(model=os.environ["ASSAY_MODEL"],
                                               messages=messages, tools=[TOOL], **params)
        msg = reply.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        print(f"step {step}: {msg.content or ''}", flush=True)
        if not msg.tool_calls:
            return 0
        for call in msg.tool_calls:
            command = json.loads(call.function.arguments)["command"]
            run = subprocess.run(command, shell=True, capture_output=True, text=True,
                                 timeout=120)
            output = (run.stdout + run.stderr)[-4000:] + f"\n(exit {run.returncode})"
            print(f"$ {command}\n{output}", flush=True)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return 1  # out of steps


if __name__ == "__main__":
    sys.exit(main())
