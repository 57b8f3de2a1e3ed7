"""Grade /app/summary.json; print {"correctness": 0|1, "format": 0|1} (reward.json)."""

import json
import sys

EXPECTED = {"count": 7, "errors": 2, "max_ms": 1210}  # counted by hand from access.log

try:
    with open(sys.argv[1], encoding="utf-8") as fh:
        summary = json.load(fh)
except (OSError, ValueError):
    summary = None
well_formed = isinstance(summary, dict) and set(summary) == set(EXPECTED) and all(
    type(v) is int for v in summary.values())
print(json.dumps({"correctness": int(summary == EXPECTED), "format": int(well_formed)}))
