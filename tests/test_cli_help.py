"""What `--help` shows is what a user types: Rich's markup must not eat bracketed text such as
the extra in ``pip install 'assay[ray]'``."""

from __future__ import annotations

from conftest import run_cli


def test_exp_run_help_keeps_the_ray_extra() -> None:
    res = run_cli(["exp", "run", "--help"], env={"COLUMNS": "200"})
    assert res.code == 0
    assert "pip install 'assay[ray]'" in res.stdout
