"""Tool calls drawn as what they are (``report/tool_calls.py``): a command as the command, a
patch or an edit as a diff, a write as its lines, anything else as text, never JSON escapes;
arguments that are not one whole JSON object (cut at the display cap, or hostile) stay text,
and the page's template escapes every value. Pure functions and the real template; the pages
of a real agent's trials are in tests/test_trial_view.py."""

from __future__ import annotations

import json

from assay.report.render import render
from assay.report.tool_calls import MAX_LINES, call_lines, call_view, without_echo

CMD = "python3 -c \"print('a\\tb')\"\npytest -q"


def test_a_shell_command_reads_as_typed() -> None:
    v = call_view("run_shell_command", json.dumps({"command": CMD, "description": "two"}))
    assert (v.kind, v.command, v.fields) == ("command", CMD, [("description", "two")])
    argv = call_view("bash", json.dumps({"cmd": ["git", "apply", "my fix.patch"]}))
    assert argv.command == "git apply 'my fix.patch'"


def test_patches_edits_and_writes_read_as_diffs() -> None:
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
    v = call_view("apply_patch", json.dumps({"input": patch}))
    assert v.kind == "patch"
    assert [(line["cls"], line["text"]) for line in v.lines][3:5] == [("del", "-x = 1"),
                                                                       ("add", "+x = 2")]
    e = call_view("edit", json.dumps({"file_path": "src/a.py", "old_string": "a - b",
                                      "new_string": "a + b"}))
    assert (e.kind, e.path, [line["text"] for line in e.lines]) == (
        "edit", "src/a.py", ["-a - b", "+a + b"])
    w = call_view("write_file", json.dumps({"path": "NOTES.txt", "content": "x\n" * 1000}))
    assert w.kind == "write" and len(w.lines) == MAX_LINES + 1
    assert w.lines[-1]["text"] == f"… {1000 - MAX_LINES} more lines"


def test_the_terminal_lines_are_the_same_shapes() -> None:
    """``trial show`` prints ``call_lines``: the command after ``$`` (a second line indented
    under it), a patch's and an edit's diff lines with their classes, other arguments as
    ``key: value``, a multi-line value under its key; never the JSON text."""
    cmd = call_lines(call_view("run_shell_command", json.dumps({"command": CMD,
                                                                "description": "two"})))
    assert cmd == [("tool", "tool run_shell_command:"),
                   ("cmd", "$ " + CMD.splitlines()[0]), ("cmd", "  pytest -q"),
                   ("key", "description: two")]
    edit = call_lines(call_view("edit", json.dumps({"file_path": "src/a.py",
                                                    "old_string": "a - b",
                                                    "new_string": "a + b"})))
    assert edit == [("tool", "tool edit src/a.py:"), ("del", "-a - b"), ("add", "+a + b")]
    other = call_lines(call_view("search", json.dumps({"query": "two\nlines", "n": 3})))
    assert other == [("tool", "tool search:"), ("key", "query:"), ("key", "  two"),
                     ("key", "  lines"), ("key", "n: 3")]
    assert call_lines(call_view("noop", "")) == [("tool", "tool noop")]
    assert not any("\\n" in text or '{"' in text for _, text in cmd + edit + other)


def test_what_is_not_a_whole_object_stays_text() -> None:
    cut = json.dumps({"command": "echo " + "x" * 50})[:30]  # cut at a display cap
    assert call_view("t", cut).fields == [("arguments", cut)]
    assert call_view("t", "[1, 2]").fields == [("arguments", "[1, 2]")]
    odd = call_view("read", json.dumps({"absolute_path": "/w/a.py", "limit": 5}))
    assert (odd.kind, odd.path, odd.fields) == ("fields", "/w/a.py", [("limit", "5")])


def test_a_result_that_echoes_its_command_loses_the_echo_only() -> None:
    calls = [call_view("run_shell_command", json.dumps({"command": "ls src"}))]
    assert without_echo("Command: ls src\nDirectory: (root)\na.py", calls) == \
        "Directory: (root)\na.py"
    assert without_echo("$ ls src\na.py", calls) == "a.py"
    assert without_echo("ls srcs\na.py", calls) == "ls srcs\na.py"
    assert without_echo("Command: ls src\n", []) == "Command: ls src\n"


def test_the_template_escapes_every_value() -> None:
    hostile = "<script>alert(1)</script>"
    calls = [call_view(hostile, json.dumps({"command": hostile, hostile: hostile})),
             call_view("edit", json.dumps({"path": hostile, "old_string": hostile,
                                           "new_string": "ok"}))]
    html = render("trial_steps.html.j2", s={
        "n": 1, "text": "", "reasoning": "", "tools": calls, "results": [hostile],
        "error": None, "figures": ""})
    assert "<script>" not in html and html.count("&lt;script&gt;") >= 6
    assert '<pre class="cmd">$ &lt;script&gt;' in html and 'class="del">-&lt;script' in html
