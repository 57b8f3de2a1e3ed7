#!/bin/bash
# The reference fix: read the file with the csv module, empty cells count as zero.
set -euo pipefail
cat > /app/total.py <<'PY'
"""Print the total of one column of a CSV file: total.py FILE COLUMN."""

import csv
import sys


def column_total(path, column):
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return sum(float(row[column] or 0) for row in reader)


if __name__ == "__main__":
    print(f"{column_total(sys.argv[1], sys.argv[2]):.2f}")
PY
