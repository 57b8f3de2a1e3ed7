"""Reading a mini-swe-agent trajectory (the JSON its ``-o`` names) as data.

mini prints no JSON on stdout: the trajectory is its structured output. It is rewritten after
every step (and once more when an exception ends the run), so even a run killed mid-way
leaves the trajectory of its last finished step. Pure functions over the bytes, so a kept
``agent/trajectory.json`` can be read again later the same way.

What is read: ``info.exit_status`` (``Submitted``, ``LimitsExceeded``, ``TimeExceeded``,
``RepeatedFormatError``, or the class name of the exception that ended the run, e.g.
``AuthenticationError``), ``info.model_stats`` (the agent's own cost and call count),
``info.mini_version``, and from ``messages`` the assistant turns, their tool calls and the
usage each response reported. Nothing missing is filled in: a figure the trajectory lacks
stays None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: what the trajectory can say that the adapter names (docs/guide/agents.md lists the same names)
ANOMALIES = {
    "trajectory_missing": "no trajectory file: mini ended before its first save",
    "trajectory_unreadable": "the trajectory is not a JSON object with info and messages",
    "exit_status_missing": "the trajectory has no exit status: the run was cut off mid-step",
    "calls_disagree_with_turns": "info.model_stats.api_calls is not the number of assistant "
                                 "turns in messages",
}

#: exception class names that end a run before the model could do anything on our side's
#: account: a key, a model name or a parameter the endpoint refuses
CONFIG_ERRORS = ("AuthenticationError", "NotFoundError", "UnsupportedParamsError",
                 "PermissionDeniedError")


@dataclass
class Trajectory:
    """What one trajectory says, ready for the execution record."""

    readable: bool = False
    #: what mini wrote, kept as written (``str``, not a Literal): the agent names it, and a
    #: newer mini or an exception's class name (``KeyboardInterrupt``, ...) is an open set;
    #: the adapter's ``_status`` maps the names it knows onto the execution status
    exit_status: str | None = None
    submission: str | None = None
    mini_version: str | None = None
    #: assistant messages (model responses the agent accepted, including format errors)
    turns: int = 0
    tool_calls: int = 0
    commands: list[str] = field(default_factory=list)
    #: the agent's own figures, as reported
    claimed_cost_usd: float | None = None
    claimed_api_calls: int | None = None
    usage: dict[str, int] | None = None
    usage_missing_turns: int = 0
    exception: str | None = None
    anomalies: dict[str, int] = field(default_factory=dict)

    def flag(self, name: str) -> None:
        self.anomalies[name] = self.anomalies.get(name, 0) + 1

    def to_record(self) -> dict[str, Any]:
        return {"readable": self.readable, "exit_status": self.exit_status,
                "submission": self.submission, "mini_version": self.mini_version,
                "turns": self.turns, "tool_calls": self.tool_calls,
                "commands": self.commands[:50], "exception": self.exception}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _add_usage(total: dict[str, int], usage: dict[str, Any]) -> None:
    for key, name in (("prompt_tokens", "input"), ("completion_tokens", "output"),
                      ("total_tokens", "total")):
        n = _int(usage.get(key))
        if n is not None:
            total[name] = total.get(name, 0) + n
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        total["cached_input"] = total.get("cached_input", 0) + details["cached_tokens"]


def read_trajectory(raw: bytes | None) -> Trajectory:
    """The trajectory's facts; ``raw`` None means the file was never written."""
    traj = Trajectory()
    if raw is None:
        traj.flag("trajectory_missing")
        return traj
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("info"), dict) \
            or not isinstance(data.get("messages"), list):
        traj.flag("trajectory_unreadable")
        return traj
    traj.readable = True
    info: dict[str, Any] = data["info"]
    traj.exit_status = info.get("exit_status") or None
    if traj.exit_status is None:
        traj.flag("exit_status_missing")
    traj.submission = info.get("submission") if isinstance(info.get("submission"), str) else None
    traj.mini_version = info.get("mini_version") if isinstance(info.get("mini_version"),
                                                               str) else None
    stats = found if isinstance(found := info.get("model_stats"), dict) else {}
    cost = stats.get("instance_cost")
    traj.claimed_cost_usd = float(cost) if isinstance(cost, int | float) else None
    traj.claimed_api_calls = _int(stats.get("api_calls"))
    usage: dict[str, int] = {}
    for msg in data["messages"]:
        if not isinstance(msg, dict):
            continue
        extra = found if isinstance(found := msg.get("extra"), dict) else {}
        if msg.get("role") == "exit":
            traj.exception = extra.get("exception_str") or None
            continue
        response = extra.get("response")
        if msg.get("role") != "assistant" and not isinstance(response, dict):
            continue
        traj.turns += 1
        calls = msg.get("tool_calls")
        traj.tool_calls += len(calls) if isinstance(calls, list) else 0
        for action in extra.get("actions") or []:
            if isinstance(action, dict) and isinstance(action.get("command"), str):
                traj.commands.append(action["command"])
        got = response.get("usage") if isinstance(response, dict) else None
        if isinstance(got, dict):
            _add_usage(usage, got)
        else:
            traj.usage_missing_turns += 1
    traj.usage = usage or None
    if traj.claimed_api_calls is not None and traj.claimed_api_calls != traj.turns:
        traj.flag("calls_disagree_with_turns")
    return traj


def usage_check(traj_usage: dict[str, int] | None, missing_turns: int,
                gateway: dict[str, Any] | None) -> dict[str, Any]:
    """The usage the responses reported to the agent against the gateway's ledger: every
    response mini saw came through the gateway, so the two agree exactly or something between
    them changed a figure."""
    if not isinstance(gateway, dict):
        return {"comparable": False, "reason": "no gateway ledger for this attempt"}
    if traj_usage is None or missing_turns:
        return {"comparable": False, "reason": "the trajectory lacks usage for some turns"}
    pairs = {k: (traj_usage.get(k), gateway.get(k)) for k in ("input", "output")}
    return {"comparable": True, "agrees": all(a == b for a, b in pairs.values()),
            "agent": traj_usage, "gateway": {k: gateway.get(k) for k in ("input", "output")}}


__all__ = ["ANOMALIES", "CONFIG_ERRORS", "Trajectory", "read_trajectory", "usage_check"]
