"""Print the total of one column of a CSV file: total.py FILE COLUMN."""

import sys


def column_total(path, column):
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split(",")
        index = header.index(column)
        total = 0.0
        for line in fh:
            if not line.strip():
                continue
            total += float(line.rstrip("\n").split(",")[index])
    return total


if __name__ == "__main__":
    print(f"{column_total(sys.argv[1], sys.argv[2]):.2f}")
