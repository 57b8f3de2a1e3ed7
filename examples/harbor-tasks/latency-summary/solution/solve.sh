#!/bin/bash
python3 - <<'PY'
import json

rows = [line.split() for line in open("/app/access.log") if line.strip()]
summary = {"count": len(rows), "errors": sum(int(r[2]) >= 500 for r in rows),
           "max_ms": max(int(r[3]) for r in rows)}
json.dump(summary, open("/app/summary.json", "w"))
PY
