"""The query's output, checked against the totals worked out by hand from shop.sql:
brian 5010, dana 4101, ada 2000, chen 2100, emeka 550."""

import subprocess
from pathlib import Path


def run_query() -> list[str]:
    sql = Path("/app/top.sql").read_text()
    out = subprocess.run(["sqlite3", "/data/shop.db"], input=sql, capture_output=True,
                         text=True, check=True, timeout=30)
    return [line for line in out.stdout.splitlines() if line.strip()]


def test_three_biggest_spenders_first() -> None:
    assert run_query() == ["brian|5010", "dana|4101", "chen|2100"]


def test_the_database_is_untouched() -> None:
    count = subprocess.run(["sqlite3", "/data/shop.db", "SELECT count(*) FROM orders;"],
                           capture_output=True, text=True, check=True, timeout=30)
    assert count.stdout.strip() == "11"
