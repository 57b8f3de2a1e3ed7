"""Hidden tests of the example Harbor task: run total.py as the instruction says."""

import subprocess
import sys
from pathlib import Path

APP = Path("/app")


def total(tmp_path, text, column="amount"):
    data = tmp_path / "in.csv"
    data.write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, str(APP / "total.py"), str(data), column],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_shipped_file_still_adds_up():
    done = subprocess.run([sys.executable, str(APP / "total.py"),
                           str(APP / "data" / "sales.csv"), "amount"],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "22.75"


def test_quoted_comma_keeps_columns(tmp_path):
    assert total(tmp_path, 'customer,amount\n"Smith, J.",4.50\nAda,1.25\n') == "5.75"


def test_empty_cell_counts_as_zero(tmp_path):
    assert total(tmp_path, "customer,amount\nAda,\nGrace,2\n") == "2.00"


def test_other_column(tmp_path):
    assert total(tmp_path, 'a,b\n1,"2"\n3,4\n', column="a") == "4.00"
