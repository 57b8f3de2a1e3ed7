"""Reading the reward a check's script left in the directory the verifier mounted for it.

Harbor-style test scripts decide by writing a number (``reward.txt``) or an object of numbers
(``reward.json``, whose ``reward`` key is the one that counts) instead of by their exit code. The
directory is created empty by the verifier for one check run, outside the workspace, so nothing
the agent wrote during its session can be read here; the reading is strict anyway (no symlink,
a size cap, a finite number, ``reward.json`` before ``reward.txt`` as Harbor reads them), and
anything else is a failed check with the reason, never a pass. The script's own process tree
(the candidate's code included) can still write there, as it can print a passing summary: a
reward check is recorded as not tamper-evident for that reason.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Literal, TypedDict

REWARD_TXT = "reward.txt"
REWARD_JSON = "reward.json"
_MAX_BYTES = 64 << 10


def _read_small(path: Path) -> str:
    """The file's text, refusing a symlink or anything but a regular file (O_NOFOLLOW)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise ValueError(f"larger than {_MAX_BYTES} bytes")
    return data.decode("utf-8")


class RewardReading(TypedDict):
    """What a reward check's script left behind, as the grade's check record keeps it."""

    status: Literal["pass", "fail"]
    value: float | None  # None: no number could be read
    file: str | None  # reward.json or reward.txt; None: neither was written
    threshold: float
    detail: str | None


def _number(value: Any, *, text: bool) -> float:
    kinds = (int, float, str) if text else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"not a number: {value!r}"[:120])
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}"[:120])
    return number


def read_reward(directory: Path, threshold: float) -> RewardReading:
    """What the script left in ``directory``; ``value`` stays None when no number could be
    read."""
    out = RewardReading(status="fail", value=None, file=None, threshold=threshold, detail=None)
    for name in (REWARD_JSON, REWARD_TXT):
        path = directory / name
        if not os.path.lexists(path):
            continue
        out["file"] = name
        try:
            text = _read_small(path)
            if name == REWARD_JSON:
                data = json.loads(text)
                if not isinstance(data, dict) or "reward" not in data:
                    raise ValueError("reward.json must be an object with a numeric 'reward'")
                value = _number(data["reward"], text=False)
            else:
                value = _number(text.strip(), text=True)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            out["detail"] = f"{name} unreadable: {exc}"
            return out
        out["value"] = value
        out["status"] = "pass" if value >= threshold else "fail"
        out["detail"] = f"reward {value:g} {'>=' if value >= threshold else '<'} {threshold:g}"
        return out
    out["detail"] = "the script wrote no reward.txt or reward.json"
    return out
