#!/usr/bin/env python3
"""A contract fixture for MiniMax Code's ``mcode exec``: NOT the real CLI.

No package registry these machines reach serves ``mcode`` (``@minimax-ai/code`` and
``@minimax/code`` answer 404, and the CLI needs Node 22.19+ where the machines have 20), so
the adapter is built and tested against this program, written from the documented headless
contract (``shared/ref/mcode-headless.md``: MiniMax-AI/minimax-code ``cli/contract.ts`` and
``headless/*`` near commit 14053355). It behaves as that contract describes, and no more:

- ``mcode --version``; ``mcode exec --cwd D --config F --input - --output-format stream-json
  --timeout T --max-steps N [--permission P]``: the prompt from stdin, the config's
  ``custom_provider`` (JSON, which is YAML) with ``api: openai-completions`` and an ``apiKey``
  of the exact form ``${NAME}`` expanded from the environment.
- It really calls the model: ``<baseURL>/chat/completions`` with ``Authorization: Bearer``,
  offering two tools, ``shell`` (``{"command"}``, run in ``--cwd``) and ``write_file``
  (``{"path", "content"}``), and applies the tool calls it is answered with until an answer
  without tool calls (the final answer; none at all is ``failed`` / ``EMPTY_RESPONSE``).
- stream-json exactly as specified: base fields on every line, ``sequence`` from 1, the three
  start events lazily on the first runtime event, item ids ``<messageId>:message`` and
  ``toolCall.id`` (or ``<messageId>:tool:<i>``), deltas on started/updated, the full content on
  completed, ``turn.completed`` / ``turn.failed`` then ``exec.completed`` as the last line;
  ``usage`` summed from the responses (``inputTokens`` = prompt − cached, cache reads
  separate, ``totalTokens`` = input + output), ``usageSource``, ``usageIncomplete``; exit codes
  0 / 3 / 4 / 6 / 7 / 70 and ``mcode exec <status>: …`` on stderr for a non-success.
- ``--max-steps n``: the assistant message after the n-th ends the turn ``limit_exceeded``.

Each malformed stream a test needs is selected by a line ``fixture-variant: <name>`` in the
model's *first* answer (the scripted upstream is the one channel a test controls that reaches
a sandboxed CLI without the adapter forwarding anything test-specific), or by
``$MCODE_FIXTURE_VARIANT`` when the fixture is run directly: ``sequence_gap``,
``sequence_repeat``, ``ids_inconsistent``, ``truncated_last_line``, ``duplicate_terminal``,
``missing_exec_completed`` (crashes with exit 70 before applying any tool call),
``wrong_schema_version``, ``usage_disagrees`` (claims more tokens than the responses had) and
``compaction`` (a ``compaction`` event with the contract's history kind ``compaction_summary``,
which forces ``usageIncomplete``; the contract names compaction only as a history message, so
the event's name is this fixture's choice). Only the standard library: it runs in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

VERSION = "mcode-contract-fixture 0.1.0 (assay; contract: minimax-code@14053355)"
VARIANTS = ("normal", "sequence_gap", "sequence_repeat", "ids_inconsistent",
            "truncated_last_line", "duplicate_terminal", "missing_exec_completed",
            "wrong_schema_version", "usage_disagrees", "compaction")
TOOLS = [
    {"type": "function", "function": {
        "name": "shell", "description": "Run a shell command in the workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write a file in the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                        "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
]
EXIT = {"succeeded": 0, "timeout": 6, "limit_exceeded": 7, "cancelled": 130}


class Failed(Exception):
    def __init__(self, status: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(status)
        self.status, self.error = status, error


class Stream:
    """Writes stream-json; the variant decides how it breaks the contract."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.turn_id = "turn_" + uuid.uuid4().hex[:12]
        self.session_id = "sess_" + uuid.uuid4().hex[:12]
        self.seq = 0
        self.started = False

    def base(self, etype: str) -> dict[str, Any]:
        self.seq += 1
        if self.variant == "sequence_gap" and self.seq == 4:
            self.seq += 1
        if self.variant == "sequence_repeat" and self.seq == 5:
            self.seq -= 1
        ev = {"schemaVersion": 2 if self.variant == "wrong_schema_version" else 1,
              "sequence": self.seq, "timestampMs": int(time.time() * 1000),
              "runId": "exec_" + self.turn_id, "sessionId": self.session_id,
              "turnId": self.turn_id, "type": etype}
        if self.variant == "ids_inconsistent" and self.seq == 5:
            ev.update(sessionId="sess_other", turnId="turn_other", runId="exec_turn_other")
        return ev

    def emit(self, etype: str, **fields: Any) -> None:
        self.start()
        self.write({**self.base(etype), **fields})

    def write(self, ev: dict[str, Any], *, newline: bool = True) -> None:
        sys.stdout.write(json.dumps(ev) + ("\n" if newline else ""))
        sys.stdout.flush()

    def start(self) -> None:
        if not self.started:  # the three start events come out together, lazily
            self.started = True
            for etype in ("exec.started", "session.started", "turn.started"):
                self.write(self.base(etype))


def _config(path: str, cwd: str) -> tuple[str, str, str]:
    """(baseURL, key, model) from the config's defaultModel provider; exit 3 when unusable."""
    full = os.path.join(cwd, os.path.expanduser(path))
    try:
        with open(full, encoding="utf-8") as fh:
            cfg = json.load(fh)
        ref = cfg["defaultModel"]
        pid, model = ref.split(":", 1)[1].split("/", 1)
        provider = cfg["custom_provider"][pid]
        if provider.get("api") != "openai-completions":
            raise ValueError(f"api {provider.get('api')!r}: this fixture speaks chat only")
        key = provider["options"].get("apiKey", "")
        m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", key)
        key = os.environ.get(m.group(1), "") if m else key
        return provider["options"]["baseURL"].rstrip("/"), key, model
    except (OSError, ValueError, KeyError, IndexError, AttributeError) as exc:
        sys.stderr.write(f"mcode exec failed: config: {type(exc).__name__}: {exc}\n")
        sys.exit(3)


def _timeout_ms(text: str) -> int:
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", text)
    if not m:
        sys.stderr.write(f"mcode exec failed: invalid --timeout {text!r}\n")
        sys.exit(2)
    return int(m.group(1)) * {"ms": 1, "s": 1000, "m": 60000, "h": 3600000}[m.group(2) or "ms"]


def _call(base: str, key: str, model: str, messages: list[dict[str, Any]],
          deadline: float) -> dict[str, Any]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Failed("timeout")
    body = json.dumps({"model": model, "messages": messages, "tools": TOOLS}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=left) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")[:300]
        raise Failed("failed", {"category": "runtime", "message": f"HTTP {exc.code}: {text}",
                                "retryable": exc.code >= 500}) from None
    except TimeoutError:
        raise Failed("timeout") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise Failed("timeout") from None
        raise Failed("failed", {"category": "runtime", "message": str(exc)}) from None
    except (OSError, ValueError) as exc:
        raise Failed("failed", {"category": "runtime", "message": str(exc)}) from None


def _tool(name: str, args: dict[str, Any], cwd: str) -> tuple[str, Any]:
    if name == "shell":
        res = subprocess.run(["sh", "-c", str(args.get("command", ""))], cwd=cwd,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return ("completed" if res.returncode == 0 else "failed",
                {"exitCode": res.returncode, "stdout": res.stdout[-2000:],
                 "stderr": res.stderr[-2000:]})
    if name == "write_file":
        path = os.path.join(cwd, str(args.get("path", "")))
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(str(args.get("content", "")))
        return "completed", {"written": args.get("path")}
    return "failed", {"error": f"unknown tool {name!r}"}


def _chunks(text: str) -> list[str]:
    third = max(1, len(text) // 3)
    return [text[i:i + third] for i in range(0, len(text), third)]


class Turn:
    def __init__(self, opts: argparse.Namespace, prompt: str) -> None:
        self.opts, self.prompt = opts, prompt
        self.variant = os.environ.get("MCODE_FIXTURE_VARIANT", "normal")
        self.stream: Stream | None = None
        self.responses: list[dict[str, Any]] = []
        self.compacted = False

    def run(self) -> int:
        t0 = time.monotonic()
        deadline = t0 + _timeout_ms(self.opts.timeout) / 1000
        base, key, model = _config(self.opts.config, self.opts.cwd)
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.prompt}]
        status, error, output = "succeeded", None, None
        try:
            output = self._loop(base, key, model, messages, deadline)
        except Failed as exc:
            status, error = exc.status, exc.error
        return self._finish(status, error, output, model, int((time.monotonic() - t0) * 1000))

    def _loop(self, base: str, key: str, model: str, messages: list[dict[str, Any]],
              deadline: float) -> str:
        steps = 0
        while True:
            resp = _call(base, key, model, messages, deadline)
            steps += 1
            msg = (resp.get("choices") or [{}])[0].get("message") or {}
            content = msg.get("content") or ""
            if steps == 1:
                m = re.search(r"fixture-variant:\s*([a-z_]+)", content)
                if m and m.group(1) in VARIANTS:
                    self.variant = m.group(1)
            stream = self._stream()
            if self.opts.max_steps and steps > self.opts.max_steps:
                raise Failed("limit_exceeded")
            self.responses.append(resp)
            mid = resp.get("id") or f"assistant-{stream.turn_id}"
            if content:
                iid = f"{mid}:message"
                for i, part in enumerate(_chunks(content)):
                    stream.emit("item.started" if i == 0 else "item.updated",
                                item={"id": iid, "type": "agent_message", "contentDelta": part})
                stream.emit("item.completed",
                            item={"id": iid, "type": "agent_message", "content": content})
            calls = msg.get("tool_calls") or []
            if steps == 1 and self.variant == "compaction":
                self.compacted = True
                stream.emit("compaction", kind="compaction_summary",
                            tokensBefore=(resp.get("usage") or {}).get("prompt_tokens"))
            if not calls:
                if not content:
                    raise Failed("failed", {"category": "runtime", "code": "EMPTY_RESPONSE",
                                            "message": "the model gave no final answer"})
                return content
            if self.variant == "missing_exec_completed":
                sys.stderr.write("mcode exec failed: internal error: fixture crash\n")
                sys.exit(70)
            messages.append({"role": "assistant", "content": content or None,
                             "tool_calls": calls})
            for i, call in enumerate(calls):
                fn = call.get("function") or {}
                tid = call.get("id") or f"{mid}:tool:{i}"
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {}
                snap = {"id": tid, "name": fn.get("name"), "status": "running", "input": args}
                stream.emit("item.started", item={"id": tid, "type": "tool_call",
                                                  "toolCall": snap})
                t = time.monotonic()
                done, result = _tool(str(fn.get("name")), args, self.opts.cwd)
                snap = {**snap, "status": done, "output": result,
                        "durationMs": int((time.monotonic() - t) * 1000)}
                stream.emit("item.completed", item={"id": tid, "type": "tool_call",
                                                    "toolCall": snap})
                messages.append({"role": "tool", "tool_call_id": call.get("id") or tid,
                                 "content": json.dumps(result)})

    def _stream(self) -> Stream:
        if self.stream is None:
            self.stream = Stream(self.variant)
        return self.stream

    def _usage(self, status: str) -> tuple[dict[str, int] | None, str, bool]:
        got = [r["usage"] for r in self.responses if isinstance(r.get("usage"), dict)]
        if not got:
            return None, "unavailable", True
        cached = sum(((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
                     for u in got)
        inp = sum(u.get("prompt_tokens") or 0 for u in got) - cached
        out = sum(u.get("completion_tokens") or 0 for u in got)
        if self.variant == "usage_disagrees":
            inp, out = inp * 3 + 100, out * 3 + 100
        usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out}
        if cached:
            usage["cacheReadTokens"] = cached
        incomplete = (len(got) < len(self.responses) or status != "succeeded"
                      or self.compacted)
        return usage, "completed_responses", incomplete

    def _finish(self, status: str, error: dict[str, Any] | None, output: str | None,
                model: str, duration: int) -> int:
        stream = self._stream()
        usage, source, incomplete = self._usage(status)
        ident = {"providerId": "custom_provider", "modelId": model, "protocol":
                 "openai-completions"}
        result: dict[str, Any] = {
            "schemaVersion": 1, "type": "exec.result", "runId": "exec_" + stream.turn_id,
            "sessionId": stream.session_id, "turnId": stream.turn_id, "status": status,
            "model": ident, "usageSource": source, "usageIncomplete": incomplete,
            "durationMs": duration}
        if usage is not None:
            result["usage"] = usage
        if status == "succeeded":
            result["output"] = output
            turn = {"model": ident, "usageSource": source, "usageIncomplete": incomplete,
                    "durationMs": duration, **({"usage": usage} if usage else {})}
            terminal = ("turn.completed", turn)
        else:
            if error:
                result["error"] = error
            terminal = ("turn.failed", {"status": status, "durationMs": duration,
                                        **({"error": error} if error else {})})
        for _ in range(2 if self.variant == "duplicate_terminal" else 1):
            stream.emit(terminal[0], **terminal[1])
        times = 2 if self.variant == "duplicate_terminal" else 1
        for _ in range(times):
            ev = {**stream.base("exec.completed"), "result": result}
            if self.variant == "truncated_last_line":
                sys.stdout.write(json.dumps(ev)[: len(json.dumps(ev)) // 2])
                sys.stdout.flush()
            else:
                stream.write(ev)
        code = EXIT.get(status)
        if code is None:
            code = {"config": 3, "internal": 70}.get((error or {}).get("category", ""), 4)
        if status != "succeeded":
            sys.stderr.write(f"mcode exec {status}: {(error or {}).get('message', status)}\n")
        return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] != ["exec"]:
        sys.stderr.write("mcode exec failed: this fixture implements only `mcode exec`\n")
        return 2
    ap = argparse.ArgumentParser(prog="mcode exec", add_help=False)
    ap.add_argument("--cwd", default=os.getcwd())
    ap.add_argument("--config", required=True)
    ap.add_argument("--input", choices=["-"], required=True)
    ap.add_argument("--output-format", choices=["stream-json"], required=True)
    ap.add_argument("--timeout", default="900000")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--permission", choices=["smart", "full", "off"], default="smart")
    try:
        opts = ap.parse_args(argv[1:])
    except SystemExit:
        sys.stderr.write("mcode exec failed: invalid arguments\n")
        return 2
    opts.cwd = os.path.realpath(opts.cwd)
    if not os.path.isdir(opts.cwd):
        sys.stderr.write(f"mcode exec failed: --cwd {opts.cwd} does not exist\n")
        return 2
    prompt = sys.stdin.read()
    if not prompt.strip():
        sys.stderr.write("mcode exec failed: empty prompt on stdin\n")
        return 2
    return Turn(opts, prompt).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
