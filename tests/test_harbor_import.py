"""``assay task import-harbor``: Harbor task folders, written here in Harbor's documented layout
(``task.toml``, ``instruction.md``, ``environment/Dockerfile``, ``tests/test.sh`` writing
``/logs/verifier/reward.txt``, ``solution/solve.sh``), converted and then checked with the real
CLI, real bubblewrap sandboxes and Debian's python3 and pytest.

A task's Dockerfile is carried over and builds on its real base, pulled. Docker Hub is out of
reach here, so the checks import with ``--approximate-base``: the Debian translation of the
bundle's Dockerfile stands in (the shared test images' store keeps those builds); without it
the task is "unsupported here: cannot pull REF", checked once below. The build on a real base,
pulled from a registry on loopback, is tests/test_env_registry.py's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

from assay.agents import parse_agent
from assay.agents.base import SOLUTION_MOUNT
from assay.api import import_harbor
from assay.errors import NeverOverwrite, SuiteError
from assay.grading.verify.check_run import TESTS_MOUNT
from assay.grading.verify.reward import read_reward
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available
from assay.sandbox.bwrap import SANDBOX_WORKDIR
from assay.suites.bundle import load_bundle, tree_digest
from assay.suites.dockerfile import dockerfile_recipe
from assay.suites.harbor.docker import read_dockerfile
from assay.suites.harbor.task import SandboxPaths, path_rewriter, strip_canary

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "harbor-tasks" / "csv-column-total"

TOML = """\
version = "1.0"

[metadata]
difficulty = "easy"

[verifier]
timeout_sec = 45.0

[agent]
timeout_sec = 90.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory = "768M"
"""
DOCKERFILE = """\
FROM python:3.13-slim
WORKDIR /app
COPY greet.py /app/greet.py
"""
BUGGY = 'def greet(name):\n    return "Hello " + name\n'
# A plain script, no pytest: Harbor's contract is only the reward file.
TEST_SH = """\
#!/bin/bash
cd /app
out=$(python3 -c 'import greet; print(greet.greet("Ada"))')
if [ "$out" = "Hello, Ada!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
SOLVE_SH = """\
#!/bin/bash
cat > /app/greet.py <<'PY'
def greet(name):
    return f"Hello, {name}!"
PY
"""


def harbor_task(root: Path, name: str = "greet-task", *, toml: str = TOML,
                dockerfile: str | None = DOCKERFILE, test_sh: str = TEST_SH,
                solve_sh: str | None = SOLVE_SH,
                files: dict[str, str] | None = None) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text(
        "<!-- canary GUID 0000-harbor-test -->\n\nMake `greet` in /app/greet.py return "
        "'Hello, <name>!'.\n")
    if dockerfile is not None:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "environment" / "greet.py").write_text(BUGGY)
    (task / "tests" / "test.sh").write_text(test_sh)
    if solve_sh is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve_sh)
    for rel, text in (files or {}).items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


def task_check(bundles: Path, out: Path, *extra: str) -> tuple[int, str, list[dict[str, Any]]]:
    res = run_cli(["task", "check", str(bundles), "--reruns", "1", "--out", str(out), *extra])
    return res.code, res.stdout, json.loads((out / "task-check.json").read_text())


def squash(text: str) -> str:
    return "".join(text.split())


def translated(bundle: Path) -> dict[str, Any]:
    """The Debian translation of an imported bundle's Dockerfile (what ``--approximate-base``
    builds where the base cannot be pulled), spelled as a recipe file would spell it."""
    recipe, _ = dockerfile_recipe(bundle / "environment" / "Dockerfile")
    return recipe.model_dump(mode="json", by_alias=True)


def installed(recipe: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(Debian packages, pip requirements) a translated recipe installs, base and steps."""
    steps = recipe["steps"]
    return ([*recipe["packages"], *(p for s in steps if "apt" in s for p in s["apt"])],
            [*recipe["pip"], *(r for s in steps if "pip" in s for r in s["pip"])])


@needs_bwrap
def test_a_converted_task_carries_every_part_over_and_passes_task_check(tmp_path: Path) -> None:
    src = harbor_task(tmp_path / "harbor")
    out = tmp_path / "bundles"
    res = run_cli(["task", "import-harbor", str(src), "--out", str(out), "--approximate-base"])
    assert res.code == 0, res.stdout + res.stderr
    assert "on_base:" in res.stdout  # the table's image column (folded: see the record)
    bundle = out / "greet-task"
    spec = yaml.safe_load((bundle / "task.yaml").read_text())
    assert spec["budget"] == {"agent_wall_seconds": 90.0, "verifier_wall_seconds": 45.0}
    assert spec["resources"] == {"cpu_cores": 1.0, "memory_limit_mib": 768}
    assert spec["initial_state"]["environment"] == {"requires": ["python3"],
                                                    "image": "environment/Dockerfile",
                                                    "approximate_base": True}
    # Harbor's Dockerfile, its WORKDIR moved to the workspace's; nothing added (test.sh
    # installs nothing)
    assert (bundle / "environment" / "Dockerfile").read_text() == DOCKERFILE.replace(
        "/app", "/work")
    assert (bundle / "environment" / "greet.py").read_text() == BUGGY  # the build context
    recipe = translated(bundle)
    assert (recipe["suite"], recipe["python"], recipe["workdir"]) == ("bookworm", "3.13", "/work")
    assert "python-is-python3" in recipe["packages"]  # `python` exists, as in python:3.13
    assert recipe["steps"] == [{"workdir": "/work"}, {"copy": {
        "src": "greet.py", "dest": "/work/greet.py", "mode": None}}]
    behavior = spec["acceptance"]["behavior"]
    assert behavior["reward"] == {"dir": "/logs/verifier", "threshold": 1.0}
    assert behavior["tamper_evident"] is False
    assert spec["acceptance"]["required"] == ["behavior", "integrity"]
    # the starting tree is what the Dockerfile copies into its WORKDIR, pinned by digest
    assert sorted(p.name for p in (bundle / "repo").iterdir()) == ["greet.py"]
    assert (bundle / "repo" / "greet.py").read_text() == BUGGY
    assert spec["initial_state"]["fixture_digest"] == tree_digest(bundle / "repo")
    # Harbor's paths moved onto the sandbox's; the canary line never reaches the agent
    instruction = (bundle / "instruction.md").read_text()
    assert instruction.startswith("Make `greet` in /work/greet.py")
    assert "canary" not in instruction
    assert "cd /work\n" in (bundle / "tests" / "test.sh").read_text()
    assert "/logs/verifier/reward.txt" in (bundle / "tests" / "test.sh").read_text()
    assert "cat > /work/greet.py" in (bundle / "solution" / "solve.harbor.sh").read_text()
    report = json.loads((bundle / "harbor-import.json").read_text())
    environment = report["environment"]
    assert environment["status"] == "supported"
    assert (environment["image"], environment["image_source"], environment["base_ref"],
            environment["approximate_base"]) == (
        "environment/Dockerfile", "on_base", "docker.io/library/python:3.13-slim", True)
    assert report["path_rewrites"] == {"tests/test.sh": 1, "solution/solve.harbor.sh": 1,
                                       "environment/Dockerfile": 2, "instruction.md": 1}
    assert "where docker.io/library/python:3.13-slim cannot be pulled (--approximate-base), " \
        "the Debian translation stands in: environment/Dockerfile: FROM python:3.13-slim -> " \
        "Debian bookworm's python3 3.11" in report["notes"]
    assert not list(out.glob(".*"))  # no temporary folder left beside the bundle

    code, text, records = task_check(out, tmp_path / "check")
    assert code == 0, text
    [rec] = records
    assert (rec["status"], rec["nop"], rec["oracle"]) == ("ok", "fails behavior", "1/1")
    # a Debian stand-in for the base (the store keeps the first record of a root filesystem:
    # a store that had this image from another source keeps that one's words, the same base)
    image = rec["environment_image"]
    assert any(s.startswith(("FROM docker.io/library/python:3.13-slim could not be pulled "
                             "here: the base approximated", "FROM python:3.13-slim -> Debian"))
               for s in image["substitutions"]), image
    grade = json.loads((tmp_path / "check" / "greet-task" / "oracle" / "0" / "grades" /
                        "v1.json").read_text())
    assert grade["accepted"] is True
    assert grade["details"]["behavior"]["reward"]["value"] == 1.0
    assert "reward" in grade["details"]["not_tamper_evident"]["behavior"]

    # Imported as it is, the task builds on python:3.13-slim itself, which cannot be pulled
    # here: unsupported here with the reason, nothing run, exit 4
    [done] = import_harbor([src], tmp_path / "real")
    assert done.image_text == "on_base: environment/Dockerfile FROM " \
        "docker.io/library/python:3.13-slim"
    code, text, [rec] = task_check(tmp_path / "real", tmp_path / "check-real")
    assert code == 4, text
    assert rec["status"] == "unsupported" and rec["unsupported"].startswith(
        "unsupported here: cannot pull docker.io/library/python:3.13-slim ("), rec
    # said once, beside the task's id (not "greet-task: ... greet-task: unsupported here")
    assert "greet-task:unsupportedenvironment:unsupportedhere:cannotpull" in squash(text)
    assert not (tmp_path / "check-real" / "greet-task").exists()


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@needs_bwrap
def test_the_example_harbor_task_converts_and_its_oracle_and_mutants_check_out(
        tmp_path: Path) -> None:
    """Reduced form: every mutant but hang_at_import, which would sleep twice the limit task
    check judges it under (about 20 s; tests/test_verifier_canaries.py covers it on a short
    limit).
    Full form: ``assay task import-harbor examples/harbor-tasks/csv-column-total --out /tmp/b &&
    assay task check /tmp/b --mutants --reruns 1`` (exit 0, every mutant rejected)."""
    from assay.agents import MUTANTS

    [done] = import_harbor([EXAMPLE], tmp_path / "bundles", approximate_base=True)
    assert (done.task_id, done.status) == ("csv-column-total", "supported")
    spec = load_bundle(done.bundle).spec
    assert spec.initial_state.environment.requires == ["python3", "pytest"]
    assert (spec.budget.agent_wall_seconds, spec.budget.verifier_wall_seconds) == (300, 60)
    assert sorted(p.relative_to(done.bundle / "repo").as_posix()
                  for p in (done.bundle / "repo").rglob("*")) == ["data", "data/sales.csv",
                                                                  "total.py"]
    assert f"{TESTS_MOUNT}/test_outputs.py" in (done.bundle / "tests" / "test.sh").read_text()
    assert 'Path("/work")' in (done.bundle / "tests" / "test_outputs.py").read_text()
    assert installed(translated(done.bundle))[1] == ["pytest==8.3.4"]  # the pinned version
    picks = [a for m in MUTANTS if m.name != "hang_at_import" for a in ("--mutant", m.name)]
    code, text, [rec] = task_check(tmp_path / "bundles", tmp_path / "check", *picks)
    assert code == 0, text
    assert rec["status"] == "ok" and rec["oracle"] == "1/1" and rec["mutants"]
    assert "hang_at_import" not in rec["mutants"] and len(rec["mutants"]) >= 10, rec["mutants"]
    assert all(v.startswith("rejected") for v in rec["mutants"].values()), rec["mutants"]


@needs_bwrap
def test_a_reward_the_agent_writes_itself_is_never_believed(tmp_path: Path) -> None:
    # test.sh writes a reward only when the check passes: whatever else says 1 is the agent's
    quiet = TEST_SH.replace("else\n  echo 0 > /logs/verifier/reward.txt\n", "")
    src = harbor_task(tmp_path / "harbor", test_sh=quiet)
    [done] = import_harbor([src], tmp_path / "bundles", approximate_base=True)
    bundle = load_bundle(done.bundle)
    forge = ("mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt && echo 1 > "
             "reward.txt && echo '{\"reward\": 1}' > reward.json; "
             "mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt "
             "2>/dev/null; true")
    res = run_trial(bundle, parse_agent(f"command:{forge}"), tmp_path / "forged")
    assert res.grade is not None
    entries = {e["path"] for e in json.loads((tmp_path / "forged" / "artifact.json")
                                              .read_text())["entries"]}
    assert {"logs/verifier/reward.txt", "reward.txt", "reward.json"} <= entries
    assert res.grade.accepted is False
    assert res.grade.checks["behavior"] == "fail"
    reward = res.grade.details.behavior["reward"]
    assert reward["value"] is None and "wrote no reward" in reward["detail"]
    # the same forgery beside the real fix: the script's own reward decides, and passes
    fix = "cat > greet.py <<'PY'\ndef greet(name):\n    return f'Hello, {name}!'\nPY\n"
    res = run_trial(bundle, parse_agent("command:" + fix + forge), tmp_path / "fixed")
    assert res.grade is not None and res.grade.accepted is True


@needs_bwrap
def test_an_environment_that_cannot_be_built_is_converted_marked_and_reported(
        tmp_path: Path) -> None:
    docker = ("FROM alpine:3.20 AS build\nRUN apk add --no-cache gcc\nFROM alpine:3.20\n"
              "WORKDIR /app\nCOPY greet.py /app/\n")
    src = harbor_task(tmp_path / "harbor", "needs-gcc", dockerfile=docker)
    ok = harbor_task(tmp_path / "harbor", "greet-task")
    out = tmp_path / "bundles"
    res = run_cli(["task", "import-harbor", str(src), str(ok), "--out", str(out),
                   "--approximate-base"])
    assert res.code == 0, res.stdout
    assert squash("unsupported environment: environment/Dockerfile:3: a second FROM: "
                  "multi-stage builds are not in the subset") in squash(res.stdout)
    spec = yaml.safe_load((out / "needs-gcc" / "task.yaml").read_text())
    why = spec["initial_state"]["environment"]["unsupported"]
    # the refused line alone: nothing about the lines after it, no image named
    assert why.startswith("environment/Dockerfile:3: a second FROM: multi-stage builds ")
    assert ";" not in why and "image" not in spec["initial_state"]["environment"]
    assert (out / "needs-gcc" / "instruction.md").is_file()  # still converted
    report = json.loads((out / "needs-gcc" / "harbor-import.json").read_text())
    assert report["environment"]["status"] == "unsupported"
    assert report["environment"]["base_image"] == "alpine:3.20"
    assert report["environment"]["image_source"] is None

    code, text, records = task_check(out, tmp_path / "check")
    assert code == 4, text  # every other task ok, this one could not be checked here
    by = {r["task"]: r for r in records}
    assert by["greet-task"]["status"] == "ok"
    assert by["needs-gcc"]["status"] == "unsupported"
    assert by["needs-gcc"]["oracle"] == "0/0" and by["needs-gcc"]["nop"] is None
    assert by["needs-gcc"]["unsupported"] == why
    assert "needs-gcc:unsupportedenvironment:environment/Dockerfile:3:asecondFROM" in \
        squash(text)
    assert not (tmp_path / "check" / "needs-gcc").exists()  # no trial was run for it
    # a trial on it is refused with the same reason, before any agent runs
    res = run_trial(load_bundle(out / "needs-gcc"), parse_agent("oracle"), tmp_path / "t")
    assert res.grade is None and res.status == "infra_error"
    assert res.error == f"unsupported environment: {why}"


def test_what_the_build_on_a_base_refuses_is_named_with_its_line_and_the_rest_is_fine(
        tmp_path: Path) -> None:
    cases = {
        "multi": ("FROM python:3.12 AS build\nWORKDIR /app\nFROM python:3.12-slim\n"
                  "WORKDIR /app\nCOPY --from=build /app /app\n",
                  ["environment/Dockerfile:3: a second FROM: multi-stage builds are not in",
                   "environment/Dockerfile:5: COPY --from is not in the subset"]),
        "url": ("FROM python:3.12\nADD https://example.com/x.tar.gz /opt/\n",
                ["environment/Dockerfile:2: ADD https://example.com/x.tar.gz: a download at "
                 "build time is not in the subset"]),
        # a base the Debian translation cannot stand in for is built on as it is
        "image": ("FROM ghcr.io/acme/toolbox:1.2\nWORKDIR /srv\n", []),
        "alpine": ("FROM alpine:3.20\nRUN apk add --no-cache gcc\nWORKDIR /app\n", []),
        "outside": ("FROM debian:bookworm\nWORKDIR /app\nCOPY greet.py /opt/greet.py\n"
                    "RUN chmod 0755 /opt/greet.py\n", []),
        "root": ("FROM python:3.12\nCOPY greet.py /greet.py\n", []),
        "env": ("FROM python:3.12\nWORKDIR /app\nENV PYTHONUNBUFFERED=1 API_URL=http://x\n",
                []),
        "apt": ("FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y gcc\n", []),
    }
    for name, (docker, reasons) in cases.items():
        env = tmp_path / name / "environment"
        env.mkdir(parents=True)
        (env / "greet.py").write_text(BUGGY)
        (env / "Dockerfile").write_text(docker)
        plan = read_dockerfile(env / "Dockerfile")
        assert [r[:len(w)] for r, w in zip(plan.unsupported, reasons, strict=False)] == \
            reasons and len(plan.unsupported) == len(reasons), (name, plan.unsupported)
        assert (plan.recipe is None) == bool(reasons)
    assert plan.base_ref == "docker.io/library/ubuntu:24.04"
    # --approximate-base: what the translation would do in the base's place is noted, and
    # where it cannot stand in, that too (the build says so if it comes to that)
    plan = read_dockerfile(tmp_path / "image" / "environment" / "Dockerfile", approximate=True)
    assert plan.unsupported == [] and plan.base_ref == "ghcr.io/acme/toolbox:1.2"
    assert plan.notes == ["where ghcr.io/acme/toolbox:1.2 cannot be pulled (--approximate-base),"
                          " the Debian translation cannot stand in for it: environment/"
                          "Dockerfile:1: FROM ghcr.io/acme/toolbox:1.2: an image the subset "
                          "cannot rebuild from Debian (only debian, ubuntu, python, "
                          "buildpack-deps and astral-sh/uv python bases)"]
    plan = read_dockerfile(tmp_path / "apt" / "environment" / "Dockerfile", approximate=True)
    assert [n for n in plan.notes if n.startswith("where")] == [
        "where docker.io/library/ubuntu:24.04 cannot be pulled (--approximate-base), the "
        "Debian translation stands in: environment/Dockerfile: FROM ubuntu:24.04 -> Debian "
        "trixie"], plan.notes
    # pip installs become requirements, COPY . places the context
    env = tmp_path / "fine" / "environment"
    (env / "pkg").mkdir(parents=True)
    (env / "pkg" / "a.py").write_text("A = 1\n")
    (env / "Dockerfile").write_text(
        "FROM python:3.12-slim\n# comment\nRUN pip install --no-cache-dir \\\n    pytest==8.3 "
        "PyYAML 'scikit-learn>=1.4' pytest-json-ctrf==0.3.5\nWORKDIR /app\n"
        "RUN mkdir -p /app/out\nCOPY . .\n"
        "COPY pkg/a.py lib/\nCMD [\"sleep\", \"infinity\"]\n")
    plan = read_dockerfile(env / "Dockerfile")
    assert plan.unsupported == [] and plan.workdir == "/app"
    # pytest-json-ctrf is a tool (a pytest plugin, module ctrf), never a requirement to import
    assert plan.requires == ["python3", "pytest", "yaml", "sklearn"]
    # on its base the pip line runs as written, with the base's own pip
    assert plan.recipe is not None and plan.recipe.pip == []
    assert {"run": "pip install --no-cache-dir     pytest==8.3 PyYAML 'scikit-learn>=1.4' "
            "pytest-json-ctrf==0.3.5"} in [s.model_dump(exclude_none=True)
                                           for s in plan.recipe.steps]
    assert [(c.source.name, plan.relative(c.dest)) for c in plan.copies] == [
        ("environment", ""), ("a.py", "lib/a.py")]
    # test.sh that installs its own tools needs the network the sandbox lacks
    uv = "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/install.sh | sh\necho 1 > " \
         "/logs/verifier/reward.txt\n"
    [done] = import_harbor([harbor_task(tmp_path / "h", test_sh=uv)], tmp_path / "b")
    assert done.status == "unsupported"
    assert done.reasons == ["tests/test.sh:2: needs the network when it runs (curl -LsSf "
                            "https://astral.sh/uv/install.sh | sh): the sandbox has none"]
    # a script that talks to a local service it started is fine
    local = "#!/bin/bash\ncurl -s http://localhost:8000/health && echo 1 > " \
            "/logs/verifier/reward.txt\n"
    [done] = import_harbor([harbor_task(tmp_path / "h2", test_sh=local)], tmp_path / "b2")
    assert done.status == "supported", done.reasons


def test_a_malformed_task_toml_names_file_line_and_field_and_nothing_is_written(
        tmp_path: Path) -> None:
    good = harbor_task(tmp_path / "harbor", "good-task")
    broken = harbor_task(tmp_path / "harbor", "broken-syntax",
                         toml=TOML.replace("cpus = 1", "cpus = = 1"))
    typed = harbor_task(tmp_path / "harbor", "bad-values",
                        toml=TOML.replace("cpus = 1", 'cpus = "two"').replace(
                            "timeout_sec = 45.0", "timeout_sec = -3"))
    missing = harbor_task(tmp_path / "harbor", "no-test-sh")
    (missing / "tests" / "test.sh").unlink()
    out = tmp_path / "bundles"
    res = run_cli(["task", "import-harbor", str(good), str(broken), str(typed), str(missing),
                   "--out", str(out)])
    assert res.code == 2
    text = squash(res.stdout + res.stderr)  # rich wraps long lines anywhere
    toml_b, toml_t = broken / "task.toml", typed / "task.toml"
    assert squash(f"{toml_b}:14: invalid TOML: Invalid value (at line 14, column 8)") in text
    assert squash(f"{toml_t}:7: field 'verifier.timeout_sec': Input should be greater than 0") \
        in text
    assert squash(f"{toml_t}:14: field 'environment.cpus': Input should be a valid number") \
        in text
    assert squash(f"{missing / 'tests' / 'test.sh'}: not found") in text
    assert not out.exists() or not any(out.iterdir())  # not even the good one
    with pytest.raises(SuiteError) as info:
        import_harbor([typed], out)
    assert [(p.line, p.field) for p in info.value.problems] == [
        (7, "verifier.timeout_sec"), (14, "environment.cpus")]


def test_an_existing_bundle_is_never_overwritten(tmp_path: Path) -> None:
    src = harbor_task(tmp_path / "harbor")
    out = tmp_path / "bundles"
    [done] = import_harbor([src], out)
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
              if p.is_file()}
    (src / "environment" / "greet.py").write_text("changed = True\n")
    res = run_cli(["task", "import-harbor", str(src), "--out", str(out)])
    assert res.code == 2
    assert squash(f"{done.bundle} exists: an imported bundle is never overwritten") in \
        squash(res.stdout + res.stderr)
    with pytest.raises(NeverOverwrite):
        import_harbor([src], out)
    res = run_cli(["task", "import-harbor", str(src), "--out", str(tmp_path / "other"),
                   "--reward-threshold", "nan"])
    assert res.code == 2 and "must be a finite number" in res.stderr
    assert not (tmp_path / "other").exists()
    after = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
             if p.is_file()}
    assert after == before


def test_the_reward_is_read_strictly(tmp_path: Path) -> None:
    d = tmp_path / "r"
    d.mkdir()
    assert read_reward(d, 1.0)["detail"] == "the script wrote no reward.txt or reward.json"
    (d / "reward.txt").write_text("0.5\n")
    assert (read_reward(d, 1.0)["status"], read_reward(d, 0.5)["status"]) == ("fail", "pass")
    (d / "reward.json").write_text('{"reward": 1, "tests": 3}')  # Harbor reads JSON first
    assert read_reward(d, 1.0) | {"detail": None} == {
        "status": "pass", "value": 1.0, "file": "reward.json", "threshold": 1.0, "detail": None}
    for bad in ('{"reward": "1"}', '{"reward": true}', '[1]', '{"score": 1}'):
        (d / "reward.json").write_text(bad)
        got = read_reward(d, 0.0)
        assert got["status"] == "fail" and got["value"] is None, bad
    (d / "reward.json").unlink()
    for bad in ("nan", "inf", "one", ""):
        (d / "reward.txt").write_text(bad)
        assert read_reward(d, 0.0)["status"] == "fail", bad
    (d / "reward.txt").unlink()
    secret = tmp_path / "one.txt"
    secret.write_text("1")
    os.symlink(secret, d / "reward.txt")
    got = read_reward(d, 1.0)
    assert got["status"] == "fail" and "unreadable" in got["detail"]


def test_paths_are_rewritten_as_whole_path_components() -> None:
    paths = SandboxPaths(work=SANDBOX_WORKDIR, tests=TESTS_MOUNT, solution=SOLUTION_MOUNT)
    pattern, mapping = path_rewriter("/app", paths)
    text = ("cd /app && pytest /tests/test_a.py; cp /solution/x /app/y; /application "
            "/app-data src/tests /testsuite $HOME/app /logs/verifier/reward.txt '/app'")
    assert pattern.sub(lambda m: mapping[m.group(1)], text) == (
        "cd /work && pytest /assay/tests/test_a.py; cp /assay/solution/x /work/y; "
        "/application /app-data src/tests /testsuite $HOME/app /logs/verifier/reward.txt "
        "'/work'")
    assert strip_canary("# canary abc\n<!-- CANARY x -->\n\nDo it.\n") == "Do it.\n"
    assert strip_canary("Do it.\n# canary later\n") == "Do it.\n# canary later\n"


def test_a_reward_check_must_say_it_is_not_tamper_evident(tmp_path: Path) -> None:
    [done] = import_harbor([harbor_task(tmp_path / "harbor")], tmp_path / "b")
    path = done.bundle / "task.yaml"
    path.write_text(path.read_text().replace("    tamper_evident: false\n", ""))
    with pytest.raises(SuiteError) as info:
        load_bundle(done.bundle)
    [problem] = info.value.problems
    assert problem.field == "acceptance.behavior"
    assert problem.line is not None and "set tamper_evident: false" in problem.message


def test_an_experiment_over_an_unsupported_task_is_refused_up_front(tmp_path: Path) -> None:
    from assay.suites.experiment import load_experiment

    docker = "FROM python:3.12\nWORKDIR /app\nRUN --mount=type=cache,target=/c true\n"
    import_harbor([harbor_task(tmp_path / "harbor", "cuda-task", dockerfile=docker),
                   harbor_task(tmp_path / "harbor", "greet-task")], tmp_path / "tasks")
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: harbor-tasks\ntasks: [tasks]\narms:\n  a: {agent: nop}\n")
    with pytest.raises(SuiteError) as info:
        load_experiment(exp)
    [problem] = info.value.problems
    assert problem.path == exp and problem.field == "tasks"
    assert problem.message.startswith("task 'cuda-task' (")
    assert problem.message.endswith("unsupported environment: environment/Dockerfile:3: RUN "
                                    "--mount is not in the subset (a build-time mount needs "
                                    "BuildKit; COPY the files instead)")


def test_a_reward_directory_is_never_the_workspace_or_a_system_folder() -> None:
    from pydantic import ValidationError

    from assay.suites.bundle import RewardFile

    assert RewardFile().dir == "/logs/verifier"
    assert RewardFile(dir="/results/out", threshold=0.5).threshold == 0.5
    for bad in ("/work/logs", "/assay/out", "/usr/x", "/tmp/r", "logs/verifier", "/",
                "/logs/../work", "/proc/1"):
        with pytest.raises(ValidationError):
            RewardFile(dir=bad)
    with pytest.raises(ValidationError):
        RewardFile(threshold=float("nan"))


@needs_bwrap
def test_a_task_whose_solution_fails_is_broken_and_says_what_the_reward_was(
        tmp_path: Path) -> None:
    src = harbor_task(tmp_path / "harbor", solve_sh="#!/bin/bash\necho 'not a fix'\n")
    import_harbor([src], tmp_path / "bundles", approximate_base=True)
    code, text, [rec] = task_check(tmp_path / "bundles", tmp_path / "check")
    assert code == 1, text
    assert rec["status"] == "broken"
    assert rec["problems"] == ["oracle never accepted",
                               "oracle run 0: rejected:no_change (reward 0 < 1)"]
