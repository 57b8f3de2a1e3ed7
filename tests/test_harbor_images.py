"""``task import-harbor`` through images: the task's Dockerfile is carried over as the bundle's
(``environment/Dockerfile``, built on its base; what the tests need appended in lines a reader
sees, which the Debian translation reads too), Harbor's standard test script runs with the
image's pytest,
a multi-metric ``reward.json`` needs ``--reward-key`` or ``--reward-aggregate`` (refused at
import otherwise), Terminal-Bench 1 folders are named, compose tasks keep one reason.

Harbor folders are written here in Harbor's documented layout, with test scripts in the shapes
task authors use (the template's, a guarded installer, ``if uvx …; then``). These tests are
import-level plus one real ``task check`` on this machine's root with bubblewrap (the reward
reducer); the checks inside built images belong with the builder and the sandbox's image root.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from test_harbor_import import (
    BUGGY,
    TOML,
    harbor_task,
    installed,
    needs_bwrap,
    squash,
    task_check,
    translated,
)

from assay.api import import_harbor
from assay.errors import InputError, SuiteError
from assay.grading.verify.reward import read_reward
from assay.suites.bundle import load_bundle
from assay.suites.harbor.reward import REDUCER, REDUCER_SOURCE
from assay.suites.harbor.tests import recognise

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "harbor-tasks"

# The shape of Harbor's task template (its wording is the author's own, here as in real tasks).
TEMPLATE_SH = """\
#!/bin/bash
apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env

if [ "$PWD" = "/" ]; then
    echo "Error: set a WORKDIR" >&2
    exit 1
fi

uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  -w pandas==2.2.3 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA


if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
# A variant: installer behind a guard, a pipefail subshell, pytest inside the if.
GUARDED_SH = """\
#!/bin/bash
set -eo pipefail
if ! command -v uv &> /dev/null; then
    apt-get update >/dev/null && apt-get install -y --no-install-recommends curl ca-certificates
    (set -o pipefail; curl --fail -LsSf https://astral.sh/uv/0.10.2/install.sh | sh) || exit $?
fi
source "$HOME/.local/bin/env"
export PYTHONPATH="/app:${PYTHONPATH:-}"
if uvx --python 3.12 --with pytest==8.3.5 pytest /tests/test_outputs.py -q; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
TEST_OUTPUTS = "from greet import greet\n\ndef test_greet():\n    assert greet('Ada') == " \
    "'Hello, Ada!'\n"


def test_the_standard_test_script_runs_with_the_images_pytest(tmp_path: Path) -> None:
    src = harbor_task(tmp_path / "harbor", test_sh=TEMPLATE_SH,
                      files={"tests/test_outputs.py": TEST_OUTPUTS})
    [done] = import_harbor([src], tmp_path / "b")
    assert done.status == "supported", done.reasons
    script = (done.bundle / "tests" / "test.sh").read_text()
    assert "uvx" not in script and "astral.sh/uv/0.9.5/install.sh | sh'" in script
    assert not [line for line in script.splitlines()
                if ("curl" in line or "apt-get" in line) and not line.startswith(":")]
    assert "\npytest -p ctrf.main --ctrf /logs/verifier/ctrf.json /assay/tests/test_outputs.py" \
        " -rA\n" in \
        script
    assert script.count("\n") == TEMPLATE_SH.count("\n")  # line numbers kept for messages
    assert "echo 1 > /logs/verifier/reward.txt" in script  # the reward lines as written
    subprocess.run(["bash", "-n", str(done.bundle / "tests" / "test.sh")], check=True)
    # what the script installed goes into the image: lines appended to the Dockerfile, run on
    # the base (python3 and pip first where the base has none), read by the translation too
    docker = (done.bundle / "environment" / "Dockerfile").read_text()
    assert docker.startswith("FROM python:3.13-slim\nWORKDIR /work\n")
    assert docker.endswith(
        "RUN python3 -m pip --version >/dev/null 2>&1 || (apt-get update && apt-get install -y "
        "--no-install-recommends python3 python3-pip)\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends curl\n"
        "RUN python3 -m pip install pytest==8.4.1 pytest-json-ctrf==0.3.5 pandas==2.2.3\n")
    packages, pip = installed(translated(done.bundle))
    assert pip == ["pytest==8.4.1", "pytest-json-ctrf==0.3.5", "pandas==2.2.3"]
    assert "curl" in packages
    report = json.loads((done.bundle / "harbor-import.json").read_text())
    assert report["test_script"] == "installers moved into the image"
    assert any("uvx -p 3.13 -w pytest==8.4.1" in n and "not Python 3.13" in n
               for n in done.notes)


# As public log-report tasks write it: pytest and its CTRF plugin pip-installed by the
# Dockerfile, test.sh calling pytest itself with --ctrf=FILE.
DIRECT_CTRF_SH = """\
#!/bin/bash
mkdir -p /logs/verifier
pytest /tests/test_outputs.py -rA --ctrf=/logs/verifier/ctrf.json 2>&1
EXIT=$?
if [ $EXIT -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_a_script_asking_for_ctrf_names_the_plugin_the_verifier_does_not_autoload(
        tmp_path: Path) -> None:
    src = harbor_task(tmp_path / "harbor", test_sh=DIRECT_CTRF_SH,
                      files={"tests/test_outputs.py": TEST_OUTPUTS})
    [done] = import_harbor([src], tmp_path / "b")
    assert done.status == "supported", done.reasons
    lines = (done.bundle / "tests" / "test.sh").read_text().split("\n")
    assert lines[2] == ("pytest -p ctrf.main /assay/tests/test_outputs.py -rA "
                        "--ctrf=/logs/verifier/ctrf.json 2>&1")
    assert len(lines) == len(DIRECT_CTRF_SH.split("\n"))  # nothing else changed
    report = json.loads((done.bundle / "harbor-import.json").read_text())
    assert report["test_script"] == "as written, the CTRF plugin named"
    # a line already naming it, a comment, a pytest without --ctrf: left alone
    from assay.suites.harbor.tests import name_ctrf_plugin
    assert name_ctrf_plugin("pytest -p ctrf.main --ctrf x\n# pytest --ctrf y\npytest z") is None
    assert name_ctrf_plugin("python3 -m pytest --ctrf x /t/test_pytest.py") == \
        "python3 -m pytest -p ctrf.main --ctrf x /t/test_pytest.py"


def test_a_variant_of_the_standard_script_is_recognised_by_its_structure() -> None:
    done = recognise(GUARDED_SH)
    assert done is not None
    lines = done.text.split("\n")
    assert lines[2] == "if ! command -v uv &> /dev/null; then"
    assert lines[3].lstrip().startswith(":  # assay") and lines[4].lstrip().startswith(":  #")
    assert lines[5] == "fi" and lines[6].startswith(":  #")
    assert lines[7].startswith("export PYTHONPATH")  # not an installer: kept
    assert lines[8] == "if pytest /tests/test_outputs.py -q; then"
    # the CTRF plugin is provided even where the script did not ask for it
    assert done.requirements == ["pytest==8.3.5", "pytest-json-ctrf"]
    proc = subprocess.run(["bash", "-n"], input=done.text, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_a_script_that_only_installs_debian_and_pip_packages_gets_them_in_the_image(
        tmp_path: Path) -> None:
    script = ("#!/bin/bash\n# test deps\nDEBIAN_FRONTEND=noninteractive apt-get update && "
              "apt-get install -y python3-pytest jq\npip3 install --break-system-packages "
              "'requests==2.32.3'\npytest /tests/test_outputs.py -v\nif [ $? -eq 0 ]; then echo 1 "
              "> /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    [done] = import_harbor([harbor_task(tmp_path / "h", test_sh=script)], tmp_path / "b")
    assert done.status == "supported", done.reasons
    packages, pip = installed(translated(done.bundle))
    assert packages[-2:] == ["python3-pytest", "jq"]
    assert pip == ["requests==2.32.3"]  # no pytest-json-ctrf: no uvx, no --ctrf
    lines = (done.bundle / "tests" / "test.sh").read_text().split("\n")
    assert lines[2].startswith(":  # assay import-harbor: installed in the image instead")
    assert lines[4] == "pytest /assay/tests/test_outputs.py -v"


# As a public Harbor task (gordonyang-tbench's blob-storage) writes it: pip, else uv pip, each
# piped to tail; uvx only where it is found, the image's pytest otherwise.
FALLBACK_SH = """\
#!/bin/bash
export PATH="$HOME/.local/bin:$PATH"
pip install pytest==8.4.1 requests==2.32.3 -q 2>&1 | tail -n 5 || \\
    uv pip install --system pytest==8.4.1 requests==2.32.3 -q 2>&1 | tail -n 5 || true
if [ -f "$HOME/.local/bin/uvx" ] || which uvx > /dev/null 2>&1; then
    uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/c.json \
/tests/test_outputs.py -rA
else
    pytest --ctrf /logs/verifier/c.json /tests/test_outputs.py -rA
fi
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_an_installer_piped_to_tail_with_a_uv_fallback_is_an_installer(tmp_path: Path) -> None:
    done = recognise(FALLBACK_SH)
    assert done is not None
    assert done.requirements == ["pytest==8.4.1", "requests==2.32.3", "pytest-json-ctrf==0.3.5"]
    lines = done.text.split("\n")
    assert lines[2].startswith(":  # assay import-harbor: installed in the image instead")
    assert lines[5] == ("    pytest -p ctrf.main --ctrf /logs/verifier/c.json "
                        "/tests/test_outputs.py -rA")
    assert "pytest==8.4.1 requests==2.32.3 installed in the image" in done.notes[1]
    # looking for uvx (a path, `which`) is not running it: the import is supported
    [imported] = import_harbor([harbor_task(tmp_path / "h", test_sh=FALLBACK_SH)],
                               tmp_path / "b")
    assert imported.status == "supported", imported.reasons


def test_what_is_not_the_standard_script_still_needs_the_network(tmp_path: Path) -> None:
    assert recognise("#!/bin/bash\nuvx ruff check /app\n") is None
    assert recognise("#!/bin/bash\npytest /tests -q\n") is None
    # an installer line that also does something else is not dropped
    mixed = TEMPLATE_SH.replace("apt-get install -y curl", "apt-get install -y curl && "
                                "curl -s https://example.com/data.csv -o /app/data.csv")
    [done] = import_harbor([harbor_task(tmp_path / "h", test_sh=mixed)], tmp_path / "b")
    assert done.status == "unsupported"
    assert done.reasons == ["tests/test.sh:3: needs the network when it runs (apt-get install "
                            "-y curl && curl -s https://example.com/data.csv -o /app/data.csv"
                            "): the sandbox has none"]


def test_a_multi_metric_reward_needs_a_key_or_an_aggregate_at_import(tmp_path: Path) -> None:
    src = EXAMPLES / "latency-summary"
    out = tmp_path / "b"
    res = run_cli(["task", "import-harbor", str(src), "--out", str(out)])
    assert res.code == 2
    text = squash(res.stdout + res.stderr)
    assert squash(f"{src / 'tests' / 'test.sh'}:3: writes reward.json without a 'reward' key "
                  "(keys seen there: correctness, format, count, errors, max_ms)") in text
    assert squash("import again with --reward-key NAME or --reward-aggregate mean|min|all") \
        in text
    assert not out.exists()
    with pytest.raises(SuiteError) as info:
        import_harbor([src], out, reward_key="latency")
    [problem] = info.value.problems
    assert problem.line == 3 and problem.message.startswith(
        "--reward-key latency: not a key this file writes into reward.json")
    with pytest.raises(InputError, match="give one, not both"):
        import_harbor([src], out, reward_key="format", reward_aggregate="min")
    with pytest.raises(InputError, match="one of mean, min, all"):
        import_harbor([src], out, reward_aggregate="median")
    [done] = import_harbor([src], out, reward_key="correctness")
    spec = load_bundle(done.bundle).spec
    assert spec.acceptance.behavior is not None
    assert spec.acceptance.behavior.command == (
        'bash "$ASSAY_TESTS/test.sh"; python3 "$ASSAY_TESTS/assay_harbor_reward.py" '
        "--key 'correctness' --threshold 1.0 /logs/verifier")
    assert (done.bundle / "tests" / REDUCER).read_text() == REDUCER_SOURCE
    # the reducer runs with the image's python3, installed where the base has none
    assert (done.bundle / "environment" / "Dockerfile").read_text().endswith(
        "RUN command -v python3 >/dev/null 2>&1 || (apt-get update && apt-get install -y "
        "--no-install-recommends python3)\n")
    # a single-reward task imported with the same flag is unaffected
    [plain] = import_harbor([harbor_task(tmp_path / "h")], tmp_path / "b2",
                            reward_key="correctness")
    assert "assay_harbor_reward" not in load_bundle(plain.bundle).spec.acceptance.behavior \
        .command  # type: ignore[union-attr]
    assert any("not used: the tests write one reward" in n for n in plain.notes)


@pytest.mark.parametrize(("how", "value"), [
    (["--key", "format"], 1.0), (["--key", "correctness"], 0.0),
    (["--aggregate", "mean"], 0.5), (["--aggregate", "min"], 0.0),
    (["--aggregate", "all"], 0.0)])
def test_the_reducer_leaves_one_reward_the_verifier_reads(tmp_path: Path, how: list[str],
                                                          value: float) -> None:
    script = tmp_path / REDUCER
    script.write_text(REDUCER_SOURCE)
    d = tmp_path / "verifier"
    d.mkdir()
    (d / "reward.json").write_text('{"correctness": 0, "format": 1}')
    subprocess.run([sys.executable, str(script), *how, "--threshold", "1.0", str(d)],
                   check=True)
    got = read_reward(d, 1.0)
    assert got["value"] == value and got["file"] == "reward.json"
    assert json.loads((d / "reward.json").read_text())["format"] == 1  # metrics kept
    assert not (d / ".reward.json.assay").exists()


def test_the_reducer_decides_nothing_it_cannot(tmp_path: Path) -> None:
    script = tmp_path / REDUCER
    script.write_text(REDUCER_SOURCE)
    d = tmp_path / "verifier"
    d.mkdir()
    for body, args in [('{"format": 1}', ["--key", "correctness"]),
                       ('{"a": 1, "b": "x"}', ["--aggregate", "mean"]),
                       ('{"a": true}', ["--aggregate", "min"]), ("[1]", ["--key", "a"])]:
        (d / "reward.json").write_text(body)
        proc = subprocess.run([sys.executable, str(script), *args, str(d)],
                              capture_output=True, text=True)
        assert (d / "reward.json").read_text() == body, body  # left for the verifier to fail
        assert read_reward(d, 0.0)["status"] == "fail"
        assert proc.returncode in (0, 1)
    # a symlink planted where reward.json goes is not followed
    (d / "reward.json").unlink()
    secret = tmp_path / "secret.json"
    secret.write_text('{"a": 1}')
    (d / "reward.json").symlink_to(secret)
    proc = subprocess.run([sys.executable, str(script), "--aggregate", "min", str(d)],
                          capture_output=True, text=True)
    assert "no readable reward.json" in proc.stderr and secret.read_text() == '{"a": 1}'


@needs_bwrap
def test_the_multi_metric_example_passes_task_check_with_its_key(tmp_path: Path) -> None:
    import_harbor([EXAMPLES / "latency-summary"], tmp_path / "b", reward_key="correctness",
                  approximate_base=True)
    code, text, [rec] = task_check(tmp_path / "b", tmp_path / "check", "--mutants")
    assert code == 0, text
    assert (rec["status"], rec["nop"], rec["oracle"]) == ("ok", "fails behavior", "1/1")
    # the workspace holds a log file, no Python: mutants that plant their attack in Python
    # source are not applicable (never a problem of the task); every other one is rejected
    na = {k: v for k, v in rec["mutants"].items() if v.startswith("n/a")}
    assert na and all("no Python source" in v for v in na.values()), rec["mutants"]
    assert all(v.startswith("rejected") for k, v in rec["mutants"].items() if k not in na)
    assert len(rec["mutants"]) - len(na) >= 3 and rec["problems"] == []
    grade = json.loads((tmp_path / "check" / "latency-summary" / "oracle" / "0" / "grades" /
                        "v1.json").read_text())
    assert grade["details"]["behavior"]["reward"]["value"] == 1.0
    # access.log reaches /app by a RUN line at build time: the bundle's starting tree is empty
    # and every trial's workspace gets the log from the image (environments/seed.py), as the
    # agent in Harbor's container would find it; the oracle reads it
    assert not any((tmp_path / "b" / "latency-summary" / "repo").iterdir())
    trial = json.loads((tmp_path / "check" / "latency-summary" / "oracle" / "0" /
                        "trial.json").read_text())
    assert trial["environment_image"]["workdir_seeded"] == {
        "files": 1, "bytes": (EXAMPLES / "latency-summary" / "environment" /
                              "access.log").stat().st_size, "first": ["access.log"]}


def test_the_repositorys_examples_import_as_supported_dockerfiles(tmp_path: Path) -> None:
    done = import_harbor([EXAMPLES / "csv-column-total", EXAMPLES / "sqlite-top-customers"],
                         tmp_path / "b")
    assert [(d.task_id, d.status) for d in done] == [("csv-column-total", "supported"),
                                                    ("sqlite-top-customers", "supported")]
    assert [d.image_text for d in done] == [
        "on_base: environment/Dockerfile FROM docker.io/library/python:3.12-slim",
        "on_base: environment/Dockerfile FROM docker.io/library/python:3.12-slim"]
    sqlite = done[1].bundle
    recipe = translated(sqlite)
    packages, pip = installed(recipe)
    assert packages == ["python3", "python3-pip", "python3-venv", "python-is-python3",
                        "sqlite3", "curl"]
    assert pip == ["pytest==8.4.1", "pytest-json-ctrf==0.3.5"]
    assert {"copy": {"src": "shop.sql", "dest": "/data/shop.sql", "mode": None}} in \
        recipe["steps"]  # outside the working directory: the image's, fine
    assert recipe["workdir"] == "/work"
    assert sorted(p.name for p in (sqlite / "repo").iterdir()) == ["top.sql"]
    env = load_bundle(sqlite).spec.initial_state.environment
    assert (env.image, env.approximate_base) == ("environment/Dockerfile", False)


def test_files_outside_the_workdir_env_and_heredocs_are_the_images(tmp_path: Path) -> None:
    docker = ("FROM python:3.12-slim\nWORKDIR /app\nENV MODE=strict\n"
              "COPY greet.py /opt/lib/greet.py\nCOPY greet.py /etc/greet.conf\n"
              "RUN chmod 0755 /opt/lib/greet.py\n"
              "RUN <<EOF\nFROM is only text here\napt-get install nothing\nEOF\n"
              "COPY <<EOF /app/notes.txt\nleft by the Dockerfile\nEOF\n"
              "COPY greet.py .\n")
    toml = TOML + '\n[environment.env]\nLOG_LEVEL = "debug"\nTOKEN = "${HOST_TOKEN}"\n'
    src = harbor_task(tmp_path / "h", dockerfile=docker, toml=toml)
    [done] = import_harbor([src], tmp_path / "b")
    # the one blocker is the host variable; no line of the Dockerfile is a reason
    assert done.reasons == ["task.toml [environment].env TOKEN: reads the host's variable "
                            "(${HOST_TOKEN}), which the sandbox never passes on"]
    docker = (done.bundle / "environment" / "Dockerfile").read_text()
    assert docker.endswith("[environment].env\nENV LOG_LEVEL=\"debug\"\n"), docker
    recipe = translated(done.bundle)
    assert {"env": {"LOG_LEVEL": "debug"}} in recipe["steps"] and "TOKEN" not in docker
    assert {"env": {"MODE": "strict"}} in recipe["steps"]
    assert {"copy": {"src": "greet.py", "dest": "/etc/greet.conf", "mode": None}} in \
        recipe["steps"]
    assert {"run": "FROM is only text here\napt-get install nothing\n"} in recipe["steps"]
    assert (done.bundle / "repo" / "notes.txt").read_text() == "left by the Dockerfile\n"
    assert (done.bundle / "repo" / "greet.py").read_text() == BUGGY
    assert "python-is-python3" in recipe["packages"]  # FROM python:*: `python` exists


def test_a_compose_task_is_unsupported_for_that_reason_alone(tmp_path: Path) -> None:
    docker = "FROM alpine:3.20\nRUN apk add curl\nWORKDIR /app\n"
    src = harbor_task(tmp_path / "h", dockerfile=docker, test_sh=TEMPLATE_SH.replace(
        "uvx", "uvx-not"), files={"environment/docker-compose.yaml": "services: {}\n"})
    [done] = import_harbor([src], tmp_path / "b")
    assert done.reasons == ["environment/docker-compose.yaml: several containers (docker "
                            "compose) need a container engine; assay runs one image per task"]
    assert load_bundle(done.bundle).spec.initial_state.environment.image is None


def test_a_verifier_in_a_container_of_its_own_is_a_blocker(tmp_path: Path) -> None:
    toml = TOML.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    [done] = import_harbor([harbor_task(tmp_path / "h", toml=toml)], tmp_path / "b")
    assert done.reasons == ["task.toml [verifier].environment_mode = 'separate': Harbor runs "
                            "the tests in a container of their own (tests/Dockerfile) on the "
                            "declared artifacts; assay's verifier runs in the task's image on "
                            "the delivered workspace"]


def test_a_terminal_bench_1_task_is_named_with_how_to_convert_it(tmp_path: Path) -> None:
    tb = tmp_path / "tb-task"
    (tb / "tests").mkdir(parents=True)
    (tb / "task.yaml").write_text("instruction: do it\n")
    (tb / "run-tests.sh").write_text("#!/bin/bash\npytest tests\n")
    (tb / "docker-compose.yaml").write_text("services: {}\n")
    res = run_cli(["task", "import-harbor", str(tb), "--out", str(tmp_path / "b")])
    assert res.code == 2
    assert squash(f"{tb / 'task.yaml'}: a Terminal-Bench 1 task (task.yaml, run-tests.sh), not "
                  "a Harbor task: convert it with Harbor's `harbor tasks migrate -i "
                  "<terminal-bench task(s)> -o <harbor tasks>` and import the result") in \
        squash(res.stdout + res.stderr)


def test_a_server_the_solution_leaves_for_the_tests_is_noted(tmp_path: Path) -> None:
    """A public Harbor task's ``solve.sh`` started an HTTP server with ``nohup ... &`` and its
    tests called ``127.0.0.1:8080``: that passes in Harbor, where the tests run in the agent's
    live container, and cannot pass here, where the verifier's sandbox is fresh. The import
    says so (a note: a solution may start a helper for itself, as another public task's does,
    and then the tests call nothing)."""
    serve = ("#!/bin/bash\ncat > /app/server.py <<'PY'\nprint('serving')\nPY\n"
             "nohup python3 /app/server.py >/var/log/server.log 2>&1 &\nsleep 1\n")
    calls = "import urllib.request\n\n\ndef test_up():\n" \
            "    urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=5)\n"
    [done] = import_harbor([harbor_task(tmp_path / "h", solve_sh=serve,
                                        files={"tests/test_outputs.py": calls})], tmp_path / "b")
    [note] = [n for n in done.notes if "leaves a process running" in n]
    assert note.startswith("solution/solve.sh:5 leaves a process running and "
                           "tests/test_outputs.py:5 calls 127.0.0.1:8080")
    assert done.status == "supported"  # a note, not a blocker
    # a helper the solution starts for itself, with tests that call no port: nothing to say;
    # nor for a line that only continues with &&
    helper = "#!/bin/bash\npython3 /app/mock.py > /tmp/mock.log 2>&1 &\ntrue &&\n  true\n"
    [plain] = import_harbor([harbor_task(tmp_path / "h2", solve_sh=helper)], tmp_path / "b2")
    assert not [n for n in plain.notes if "leaves a process running" in n]
