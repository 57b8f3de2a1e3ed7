"""What `--help` shows is what a user types: Rich's markup must not eat bracketed text such as
the extra in ``pip install 'assay[ray]'``."""

from __future__ import annotations

from conftest import run_cli


def test_exp_run_help_keeps_the_ray_extra() -> None:
    res = run_cli(["exp", "run", "--help"], env={"COLUMNS": "200"})
    assert res.code == 0
    assert "pip install 'assay[ray]'" in res.stdout


def test_help_reads_at_80_columns() -> None:
    """Reflowed text, readable value names, commands in the order a user meets them
    (cli/help_text.py): no ``<bool>``/``<str>`` type labels, no ``[[PILOT]]`` or
    ``{DIR...}...``, no docstring line break left in the middle of a sentence."""
    from assay.cli.help_text import WORKFLOW

    root = run_cli(["--help"], env={"COLUMNS": "80"})
    assert root.code == 0
    commands = root.stdout[root.stdout.index("Commands"):]
    listed = [line.split()[1] for line in commands.splitlines()
              if line.startswith("│ ") and line[2] != " "]  # a continuation line is indented
    assert listed == [c for c in WORKFLOW if c in listed] and listed[:4] == [
        "run", "report", "compare", "history"], listed
    # the run command's docstring wrapped after "Exit 0 done," in the source: one paragraph now
    assert "again. Exit 0 done, 1 below --fail-under" in " ".join(root.stdout.split())
    for args in (["exp", "plan", "--help"], ["history", "--help"], ["run", "--help"],
                 ["suite", "check", "--help"]):
        res = run_cli(args, env={"COLUMNS": "80"})
        assert res.code == 0, args
        text = res.stdout
        for bad in ("<bool>", "<str>", "<int", "<float", "<list[", "<path>", "[[", "{"):
            assert bad not in text, (args, bad, text)
    plan = run_cli(["exp", "plan", "--help"], env={"COLUMNS": "80"}).stdout
    assert "[OPTIONS] [PILOT]" in plan and "--seed              INTEGER" in plan
    hist = run_cli(["history", "--help"], env={"COLUMNS": "80"}).stdout
    assert "[OPTIONS] DIR..." in hist


def test_every_option_says_what_it_does() -> None:
    from assay.cli.reference import root_command, walk

    silent = [f"{' '.join(path)} {param.opts[0]}" for path, cmd in walk(root_command())
              if not hasattr(cmd, "commands") for param in cmd.params
              if param.param_type_name == "option" and not param.hidden
              and not (param.help or "").strip()]
    assert silent == []
