"""Multi-metric ``reward.json``: which number of it decides an imported Harbor task.

Harbor keeps every key of ``/logs/verifier/reward.json`` as a metric; an assay check passes or
fails on one number, read from the key ``reward``. A task whose tests write ``reward.json``
without that key could be imported and then never pass, so the import decides here, before
anything is written: ``--reward-key NAME`` picks one metric, ``--reward-aggregate`` combines
them (``mean``: their mean; ``min``: the smallest; ``all``: 1 when every metric reaches the
reward threshold, else 0), and with neither the task is refused at import, naming the file and
line that writes ``reward.json`` and the keys seen there.

The choice is applied where the reward is written: the bundle's check runs ``test.sh`` and then
:data:`REDUCER` (a small script written beside the tests), which replaces the multi-metric
``reward.json`` by one with a ``reward`` key (the metrics kept beside it) before the verifier
reads the directory. Finding the keys is a text scan of the test files (JSON-style string keys
in the file that names ``reward.json``): it can miss keys built at run time, so an unknown key
is refused only when some keys were seen and the named one is not among them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

AGGREGATES = ("mean", "min", "all")
REDUCER = "assay_harbor_reward.py"
_KEY = re.compile(r"""["']([A-Za-z_][A-Za-z0-9_.-]{0,63})["']\s*:""")
_KWARG = re.compile(r"\breward\s*=|\[\s*[\"']reward[\"']\s*\]")
_MAX_SCAN = 1 << 20


@dataclass
class RewardScan:
    """Where the tests name ``reward.json`` (file label, line), and the keys seen there."""

    file: str | None = None
    line: int | None = None
    keys: list[str] = field(default_factory=list)
    has_reward: bool = False

    @property
    def multi_metric(self) -> bool:
        return self.file is not None and not self.has_reward


def scan_rewards(tests: Path) -> RewardScan:
    """Scan the test files under ``tests`` for a ``reward.json`` writer."""
    scan = RewardScan()
    if not tests.is_dir():
        return scan
    files = sorted((p for p in tests.rglob("*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (p != tests / "test.sh", p))  # test.sh first: it writes it
    for path in files:
        try:
            if path.stat().st_size > _MAX_SCAN:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "reward.json" not in text:
            continue
        if scan.file is None:
            scan.file = f"tests/{path.relative_to(tests).as_posix()}"
            scan.line = text[:text.index("reward.json")].count("\n") + 1
        keys = _KEY.findall(text)
        scan.keys = list(dict.fromkeys([*scan.keys, *keys]))
        if "reward" in keys or _KWARG.search(text):
            scan.has_reward = True
    return scan


def reducer_command(key: str | None, aggregate: str | None, reward_dir: str,
                    threshold: float, tests_var: str = "$ASSAY_TESTS") -> str:
    """The shell that follows ``test.sh`` in the check: the reducer with its choice."""
    how = f"--key {key!r}" if key is not None else f"--aggregate {aggregate}"
    return (f'python3 "{tests_var}/{REDUCER}" {how} --threshold {threshold!r} '
            f"{reward_dir}")


#: The reducer written beside the tests (standard library only: it runs with the image's
#: python3). It leaves a ``reward.json`` that already has ``reward`` alone, and leaves the
#: file unchanged with a message when it cannot decide (the verifier then fails the check
#: with its own reason).
REDUCER_SOURCE = '''\
"""Written by assay task import-harbor: one reward out of a multi-metric reward.json."""
import argparse
import json
import math
import os
import sys

p = argparse.ArgumentParser()
p.add_argument("--key")
p.add_argument("--aggregate", choices=["mean", "min", "all"])
p.add_argument("--threshold", type=float, default=1.0)
p.add_argument("dir")
a = p.parse_args()
path = os.path.join(a.dir, "reward.json")
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        data = json.loads(fh.read(65537).decode("utf-8"))
except (OSError, ValueError) as exc:
    sys.exit(f"assay reward: no readable reward.json ({exc}); left as it is")
if not isinstance(data, dict) or "reward" in data:
    sys.exit(0)
nums = {k: v for k, v in data.items() if isinstance(v, (int, float))
        and not isinstance(v, bool) and math.isfinite(v)}
if a.key is not None:
    if a.key not in nums:
        sys.exit(f"assay reward: reward.json has no number under {a.key!r}; left as it is")
    value = float(nums[a.key])
elif not nums or len(nums) != len(data):
    sys.exit("assay reward: reward.json holds something other than numbers; left as it is")
elif a.aggregate == "mean":
    value = sum(nums.values()) / len(nums)
elif a.aggregate == "min":
    value = float(min(nums.values()))
else:
    value = 1.0 if all(v >= a.threshold for v in nums.values()) else 0.0
tmp = os.path.join(a.dir, ".reward.json.assay")
with open(tmp, "w", encoding="utf-8") as fh:
    json.dump({"reward": value, **data}, fh)
os.replace(tmp, path)
'''
