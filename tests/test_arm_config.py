"""An arm's configuration checked before the first trial, and its own files in the sandbox:
through the CLI, with real sandboxes, the real gateway and the scripted upstream.

- the experiments guide's example (docs/guide/experiments.md), copied into a temporary folder
  beside a copy of the example bundles and an ``agents/my_agent.py``, runs as written: the
  agent starts from ``/assay/agent``, asks the model through the gateway, and a changed agent
  file is refused on resume;
- each misconfiguration is refused before anything is written, with its message and exit 2.

Full form of the guide's run: the file as written (4 dev tasks x 3 repetitions x 3 arms, the
third being the noise floor's A/A copy of the baseline, = 36 trials), with ``ASSAY_GUIDE_FULL=1``
(``make test-full`` sets it). ``make test`` runs the same file with one repetition (12 trials):
every line of it is read and applied as written but ``repetitions:``, and each repetition runs
the same code path, so the other 24 trials cost about 20 CPU-seconds for nothing a first one
does not show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.bundles import make_bundle
from support.scripted_server import ASK_THROUGH_GATEWAY, Answer, ScriptedServer

from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
REPO = Path(__file__).resolve().parents[1]
#: the guide's repetitions, or one in the reduced form (the module docstring)
REPS = 3 if os.environ.get("ASSAY_GUIDE_FULL") == "1" else 1

MY_AGENT = ASK_THROUGH_GATEWAY + r"""
print("my_agent", sys.argv[1:], "from", __file__, "model said:", text)
print("agent dir:", os.environ.get("ASSAY_AGENT_DIR"))
print("helper:", open(os.path.join(os.path.dirname(__file__), "prompts.txt")).read().strip())
try:
    open(__file__, "a").write("# the agent edits itself\n")
    print("own file: WRITABLE")
except OSError as exc:
    print("own file: read-only", exc.errno)
"""


def guide_experiment() -> str:
    """The experiments guide's experiment.yaml block, as printed."""
    text = (REPO / "docs" / "guide" / "experiments.md").read_text()
    block = re.search(r"```yaml\n(# experiment\.yaml\n.*?)```", text, re.S)
    assert block is not None, "the experiments guide's example is gone"
    return block.group(1)


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch):
    with ScriptedServer(lambda req, n: Answer("nothing to do", model="qwen2.5-coder-7b")) as srv:
        monkeypatch.setenv("MODEL_BASE_URL", srv.base_url)
        monkeypatch.setenv("MODEL_API_KEY", SECRET)
        yield srv


def _guide_folder(tmp: Path) -> Path:
    shutil.copytree(REPO / "examples" / "agent-tasks", tmp / "examples" / "agent-tasks")
    (tmp / "agents").mkdir()
    (tmp / "agents" / "my_agent.py").write_text(MY_AGENT)
    (tmp / "agents" / "prompts.txt").write_text("be brief\n")
    exp = tmp / "experiment.yaml"
    text = guide_experiment()
    assert "\nrepetitions: 3\n" in text, "the guide's repetitions changed: update REPS"
    exp.write_text(text.replace("\nrepetitions: 3\n", f"\nrepetitions: {REPS}\n", 1))
    return exp


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@needs_bwrap
def test_the_guide_experiment_runs_as_written(tmp_path: Path, upstream) -> None:
    exp = _guide_folder(tmp_path)
    out = tmp_path / "runs" / "exp1"
    res = run_cli(["exp", "run", str(exp), "--out", str(out), "-j", "4"])
    assert res.code == 0, res.stdout + res.stderr
    logs = sorted(out.glob("trials/*/*/*/a1/agent/stdout.log"))
    # 4 dev tasks x REPS repetitions x 3 arms (the noise floor's copy of baseline), each once
    assert len(logs) == 4 * REPS * 3
    for log in logs:
        text = log.read_text()
        arm = log.parts[-5]
        checkpoint = {"baseline": "v1", "baseline~aa": "v1", "candidate": "v2"}[arm]
        assert f"my_agent ['--checkpoint', '{checkpoint}'] from " \
               "/assay/agent/agents/my_agent.py model said: nothing to do" in text
        assert "agent dir: /assay/agent" in text and "helper: be brief" in text
        assert "own file: read-only" in text
    assert len(upstream.chat_requests()) == 4 * REPS * 3
    # the arm's files are copied into the run and fingerprinted into its identity
    manifest = json.loads((out / "manifest.json").read_text())
    prints = manifest["identity"]["arms"]["baseline"]["agent_files"]
    assert list(prints) == ["agents"] and prints["agents"].startswith("sha256:")
    assert (out / "agent_files" / "baseline" / "agents" / "my_agent.py").read_text() == MY_AGENT
    # the agent cannot change its own files: they are read-only in the sandbox
    rep = json.loads((out / "report.json").read_text())
    assert rep["arms"]["baseline"]["coverage"] == 1.0
    # a changed agent file on resume is refused like any other change
    (tmp_path / "agents" / "my_agent.py").write_text(MY_AGENT + "\n# v3\n")
    again = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert again.code == 2
    assert "arms.baseline.agent_files.agents" in again.stderr
    assert len(upstream.chat_requests()) == 4 * REPS * 3


def _refused(exp: Path, out: Path) -> str:
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 2, res.stdout + res.stderr
    assert not out.exists()  # refused before anything was written
    return res.stderr


def test_an_agent_script_beside_the_file_without_agent_files_is_refused(
        tmp_path: Path, upstream) -> None:
    exp = _guide_folder(tmp_path)
    text = exp.read_text()
    exp.write_text(text.replace("    agent_files: [agents/]           # beside this file; "
                                "read-only at /assay/agent in the sandbox\n", ""))
    err = _refused(exp, tmp_path / "out")
    line = next(i for i, x in enumerate(exp.read_text().splitlines(), 1)
                if "--checkpoint v1" in x)
    assert (f"{exp}:{line}: field 'arms.baseline.agent': file agents/my_agent.py is beside "
            "the experiment file, but the agent runs in the task's workspace and cannot see "
            "it: add `agent_files: [agents/]` to arm 'baseline'") in " ".join(err.split())
    assert "arms.candidate.agent" not in err  # the other arm still names its files


def test_a_missing_agent_file_and_missing_programs_are_refused(tmp_path: Path,
                                                               upstream) -> None:
    exp = _guide_folder(tmp_path)
    text = exp.read_text()
    exp.write_text(text.replace("agents/my_agent.py --checkpoint v1", "agents/gone.py")
                   .replace("python3 agents/my_agent.py --checkpoint v2",
                            "no-such-agent-cli --fast"))
    err = " ".join(_refused(exp, tmp_path / "out").split())
    assert ("field 'arms.baseline.agent': file agents/gone.py: no such file in agent_files "
            f"(looked for {tmp_path / 'agents' / 'gone.py'})") in err
    assert ("field 'arms.candidate.agent': program 'no-such-agent-cli' is not on the "
            "sandbox's PATH") in err
    # an absolute path on the host is not in the sandbox either
    exp.write_text(text.replace("python3 agents/my_agent.py --checkpoint v1",
                                f"python3 {tmp_path / 'agents' / 'my_agent.py'}"))
    err = " ".join(_refused(exp, tmp_path / "out").split())
    assert (f"file {tmp_path / 'agents' / 'my_agent.py'} is outside what the agent's sandbox "
            "shows") in err and "list it under this arm's agent_files" in err


def test_an_arm_with_a_model_on_a_task_without_network_is_refused(tmp_path: Path,
                                                                   upstream) -> None:
    make_bundle(tmp_path / "tasks" / "calc")  # a hand-written task: network_policy: none
    (tmp_path / "agent.py").write_text(MY_AGENT)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("""name: closed
tasks: [tasks]
arms:
  B:
    agent: "command:python3 agent.py"
    agent_files: [agent.py]
    model: {name: qwen2.5-coder-7b}
  A:
    agent: nop
""")
    err = " ".join(_refused(exp, tmp_path / "out").split())
    assert (f"{exp}:7: field 'arms.B.model': arm 'B' has a model (qwen2.5-coder-7b), but task "
            f"'calc-001' ({tmp_path / 'tasks' / 'calc' / 'task.yaml'}) has network_policy: "
            "none, so its agent could never reach it: set `network_policy: model-proxy-only` "
            "under initial_state in that task.yaml, or leave this arm without a model") in err
    assert "arms.A" not in err


@pytest.mark.parametrize(("entry", "message"), [
    ("/etc", "'/etc' is absolute: agent_files are relative to the experiment file"),
    ("../elsewhere", "'../elsewhere' leaves the experiment's folder"),
    ("agentz/", "'agentz': no such file or folder beside the experiment file"),
])
def test_bad_agent_files_entries_are_refused(tmp_path: Path, upstream, entry: str,
                                             message: str) -> None:
    exp = _guide_folder(tmp_path)
    exp.write_text(exp.read_text().replace("agent_files: [agents/]           #",
                                           f"agent_files: [{entry}]           #"))
    err = " ".join(_refused(exp, tmp_path / "out").split())
    assert f"{exp}:" in err and "arms.baseline.agent_files" in err and message in err
