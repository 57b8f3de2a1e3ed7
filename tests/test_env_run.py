"""Tasks that run in a pinned image: the agent's and the verifier's sandboxes with the image's
root, the host's trusted pytest lent to it, the pin checked and recorded.

The images are real: Debian bookworm built with ``mmdebstrap`` (``tests/support/images.py``,
about 35-40 s each on the 2-core test machine), once for as long as assay's builder does not
change: they are kept across sessions unless ``ASSAY_TEST_IMAGE_CACHE=session``. The example task
``examples/agent-tasks/leaderboard-rank-007`` imports ``sortedcontainers``
(``python3-sortedcontainers``), which this host does not have: its oracle is accepted in its
image and the same tests fail on the host's system.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support import agent_cli
from support.images import base_image, cache_dir

from assay.agents import parse_agent
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "agent-tasks" / "leaderboard-rank-007"
PACKAGES = ("python3-sortedcontainers",)


def _host_has_sortedcontainers() -> bool:
    return subprocess.run(["/usr/bin/python3", "-c", "import sortedcontainers"],
                          capture_output=True, check=False).returncode == 0


def pinned_copy(tmp: Path, digest: str | None, *, image: bool = True) -> Path:
    """The example bundle copied, its pin set to ``digest`` (the image this session built:
    a Debian build is not reproducible bit for bit, so the repository's pin is this machine's
    at the time it was written)."""
    dest = tmp / "bundle"
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLE, dest, symlinks=True)
    path = dest / "task.yaml"
    text = path.read_text()
    text = re.sub(r"environment_image: \S+", f"environment_image: {digest or 'null'}", text)
    if not image:
        text = text.replace("image: environment/recipe.yaml, ", "")
        text = text.replace("  environment_image: null\n", "")
    path.write_text(text)
    return dest


@pytest.fixture
def example_image(monkeypatch: pytest.MonkeyPatch) -> Any:
    store, image = base_image(PACKAGES)
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(cache_dir(store)))
    return store, image


def grade(trial_dir: Path) -> dict[str, Any]:
    return json.loads((trial_dir / "grades" / "v1.json").read_text())


def test_the_verifier_accepts_the_oracle_and_rejects_nop_in_the_image(
        tmp_path: Path, example_image: Any) -> None:
    _store, image = example_image
    bundle = load_bundle(pinned_copy(tmp_path, image.digest))
    oracle = run_trial(bundle, parse_agent("oracle"), tmp_path / "oracle")
    assert oracle.status == "graded", oracle.error
    g = grade(tmp_path / "oracle")
    assert g["accepted"] is True, g
    record = json.loads((tmp_path / "oracle" / "trial.json").read_text())
    env = record["environment_image"]
    assert env["digest"] == image.digest and env["source_kind"] == "debian-recipe"
    assert env["workdir"] == "/work"
    pytest_tool = env["host_tools"]["pytest"]
    assert pytest_tool["mount"] == "/assay/host-python" and pytest_tool["pytest"]
    assert "pytest" in pytest_tool["names"]
    nop = run_trial(bundle, parse_agent("nop"), tmp_path / "nop")
    assert nop.status == "graded"
    g = grade(tmp_path / "nop")
    assert g["accepted"] is False and g["checks"]["behavior"] == "fail", g


def test_the_same_tests_fail_on_the_host_system(tmp_path: Path) -> None:
    """Without its image the example's oracle cannot pass: the host lacks sortedcontainers."""
    if _host_has_sortedcontainers():
        pytest.skip("this host's python3 has sortedcontainers: the contrast needs a host "
                    "without it")
    bundle = load_bundle(pinned_copy(tmp_path, None, image=False))
    assert bundle.spec.initial_state.environment.image is None
    res = run_trial(bundle, parse_agent("oracle"), tmp_path / "oracle")
    assert res.status == "graded" and res.record.environment_image is None
    g = grade(tmp_path / "oracle")
    assert g["accepted"] is False and g["checks"]["behavior"] == "fail", g


@pytest.mark.parametrize("tamper_evident", [True, False], ids=["tamper-evident", "reward"])
def test_the_deliverables_pytest_never_answers_and_which_trusted_one_does(
        tmp_path: Path, example_image: Any, tamper_evident: bool) -> None:
    """The image has Debian's pytest in /usr/lib/python3/dist-packages and the deliverable
    ships a pytest.py on PYTHONPATH, which never answers. A tamper-evident check (assay's
    reporter reads its counts) imports the host's trusted pytest, lent read-only at
    /assay/host-python; a reward check (the task's own script, judged by the reward it writes,
    as Harbor's are) imports the image's own pytest, the version the task pinned, so plugins
    installed with it (Harbor's CTRF report) load. Either way the image's python3 runs it."""
    from assay.grading.verify.check_run import run_command

    _store, image = example_image
    bundle = load_bundle(pinned_copy(tmp_path, image.digest))
    work = tmp_path / "work"
    bundle.export_starting_tree(work)
    # what a candidate could ship: its own pytest on PYTHONPATH, which must never answer
    (work / "src" / "pytest.py").write_text("raise SystemExit('the deliverable pytest ran')\n")
    probe = ("PYTHONPATH=src python3 -c 'import pytest, sortedcontainers, sys; "
             "print(pytest.__file__); print(sortedcontainers.__file__); print(sys.executable)'"
             " && cat /etc/debian_version && ls /usr/lib/python3/dist-packages/pytest >/dev/null"
             " && echo image-has-pytest")
    run = run_command(probe, work, bundle, record_dir=tmp_path / "rec",
                      tamper_evident=tamper_evident, canaries=False)
    out = (tmp_path / "rec" / "stdout.log").read_text()
    assert run.result.exit_code == 0, (out, (tmp_path / "rec" / "stderr.log").read_text())
    lines = out.splitlines()
    assert lines[0] == ("/assay/host-python/pytest/__init__.py" if tamper_evident
                        else "/usr/lib/python3/dist-packages/pytest/__init__.py")
    assert lines[1].startswith("/usr/lib/python3/dist-packages/sortedcontainers/")
    assert lines[2] == "/usr/bin/python3" and "image-has-pytest" in lines


def test_an_image_has_pytest_when_its_python_holds_the_package(tmp_path: Path) -> None:
    from assay.environments.run import image_has_pytest

    root = tmp_path / "rootfs"
    (root / "usr" / "lib" / "python3" / "dist-packages" / "pytest").mkdir(parents=True)
    assert not image_has_pytest(root)  # an empty folder is no package
    (root / "usr" / "lib" / "python3" / "dist-packages" / "pytest" / "__init__.py").touch()
    assert image_has_pytest(root)  # Debian's python3-pytest
    other = tmp_path / "other"
    (other / "usr" / "local" / "lib" / "python3.13" / "dist-packages" / "_pytest").mkdir(
        parents=True)
    assert not image_has_pytest(other)  # pytest's internals alone are not pytest
    (other / "usr" / "local" / "lib" / "python3.13" / "dist-packages" / "pytest").mkdir()
    (other / "usr" / "local" / "lib" / "python3.13" / "dist-packages" / "pytest" /
     "__init__.py").write_text("")
    assert image_has_pytest(other)  # pip's install into an image (Harbor's pins)


def test_a_pin_missing_from_the_store_is_refused_with_the_build_command(
        tmp_path: Path, example_image: Any, monkeypatch: Any) -> None:
    # without a builder (a build of the wrong digest is the builder seam's test below)
    monkeypatch.setattr("assay.environments.run._builder", lambda: None)
    bundle = load_bundle(pinned_copy(tmp_path, "sha256:" + "0" * 64))
    res = run_trial(bundle, parse_agent("oracle"), tmp_path / "t")
    assert res.status == "infra_error"
    error = res.error
    assert "sha256:" + "0" * 64 in error and "is not in the image store" in error
    assert "assay env build " in error and error.rstrip("`").endswith("recipe.yaml")
    assert not (tmp_path / "t" / "agent").exists() or not any((tmp_path / "t" / "agent").iterdir())


def test_an_unbuilt_unpinned_image_and_a_foreign_engine_are_refused(tmp_path: Path,
                                                                    monkeypatch: Any) -> None:
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("assay.environments.run._builder", lambda: None)
    bundle = load_bundle(pinned_copy(tmp_path, None))
    res = run_trial(bundle, parse_agent("nop"), tmp_path / "t")
    assert res.status == "infra_error"
    assert "no image built from 'environment/recipe.yaml'" in (res.error or "")
    assert "assay env build " in (res.error or "")
    text = (tmp_path / "bundle" / "task.yaml").read_text().replace(
        "image: environment/recipe.yaml,", "image: environment/recipe.yaml, engine: podman,")
    text = text.replace("environment_image: null", "environment_image: sha256:" + "1" * 64)
    (tmp_path / "bundle" / "task.yaml").write_text(text)
    res = run_trial(load_bundle(tmp_path / "bundle"), parse_agent("nop"), tmp_path / "t2")
    assert res.status == "infra_error" and "engine 'podman' is not supported" in \
        (res.error or "")


def test_a_task_whose_image_fails_to_build_is_unsupported_and_the_others_are_checked(
        tmp_path: Path, monkeypatch: Any) -> None:
    """In a sample of public Harbor tasks, three images fetched media from a host beyond the
    package registries at build time; the build's refusal ended ``task check`` with exit 2 and
    no report, for every task named. Now that task alone is ``unsupported`` with the reason
    (here a recipe the builder refuses before any download: the same path, in a second), the
    others are checked, and ``task-check.json`` is written."""
    from support.bundles import make_bundle

    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    tasks = tmp_path / "tasks"
    make_bundle(tasks / "calc")
    bad = pinned_copy(tmp_path / "bad", None)
    (bad / "environment" / "recipe.yaml").write_text(
        "suite: bookworm\npackages: [python3]\nfetch: https://huggingface.co/x.mp4\n")
    shutil.move(bad, tasks / "bad")
    out = tmp_path / "check"
    res = run_cli(["task", "check", str(tasks), "--reruns", "1", "--out", str(out)])
    assert res.code == 4, res.stdout + res.stderr  # unsupported beside ok: not a failure
    reports = {r["task"]: r for r in json.loads((out / "task-check.json").read_text())}
    assert reports["calc-001"]["status"] == "ok"
    bad_report = reports["leaderboard-rank-007"]
    assert bad_report["status"] == "unsupported", bad_report
    assert bad_report["unsupported"].startswith("its image could not be built here:")
    assert "fetch" in bad_report["unsupported"]


def test_an_image_path_outside_the_bundle_is_refused_at_load(tmp_path: Path) -> None:
    from assay.suites.errors import SuiteError

    dest = pinned_copy(tmp_path, None)
    path = dest / "task.yaml"
    path.write_text(path.read_text().replace("image: environment/recipe.yaml",
                                             "image: ../../../etc/passwd"))
    with pytest.raises(SuiteError) as info:
        load_bundle(dest)
    assert "initial_state.environment.image" in str(info.value)
    assert "outside the bundle" in str(info.value)


def test_env_shell_runs_piped_commands_in_the_tasks_image(tmp_path: Path,
                                                         example_image: Any) -> None:
    _store, image = example_image
    dest = pinned_copy(tmp_path, image.digest)
    script = ("cat /etc/debian_version; pwd; id -un; ls src/leaderboard; "
              "PYTHONPATH=src python3 -c 'import leaderboard, sortedcontainers; print(\"ok\")';"
              " touch scratch-file; exit 3\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ASSAY_CACHE_DIR": os.environ[
        "ASSAY_CACHE_DIR"]}
    done = subprocess.run([sys.executable, "-m", "assay", "env", "shell", str(dest)],
                          input=script, capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("12.") and lines[1] == "/work"  # Debian 12, the image's workdir
    assert lines[2] == "sandbox"  # the synthetic passwd over the image's own
    assert "board.py" in lines and lines[-1] == "ok", lines
    assert not (dest / "repo" / "scratch-file").exists()  # a scratch copy, not the bundle


def test_the_guard_and_the_mount_agree_on_the_host_python_folder() -> None:
    """pytest_boot cannot import assay: its copy of the mount point must equal the one the
    verifier mounts at, or the trusted pytest would be treated as the deliverable's."""
    from assay.environments.run import HOST_PYTHON_MOUNT
    from assay.grading.verify import pytest_boot

    assert pytest_boot.HOST_PYTHON_MOUNT == HOST_PYTHON_MOUNT


qwen_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "qwen.sh", "qwen-code")


def test_a_real_agent_cli_works_inside_the_image(tmp_path: Path, example_image: Any,
                                                 qwen_bin: Path) -> None:
    """Qwen Code (node, from the project's install: nothing of node is in the image) driven
    by the built-in replay model through the gateway, in the task's image: its shell tool runs
    the image's python3, which has sortedcontainers (the host's has not), so the fix is only
    applied when the agent's commands really ran in the image. Accepted by the verifier in the
    same image. (About 20-40 s once the CLI is installed.)"""
    _store, image = example_image
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.move(pinned_copy(tmp_path, image.digest), tasks / "leaderboard-rank-007")
    fix = (EXAMPLE / "solution" / "solve.sh").read_text()
    session = [
        "cat src/leaderboard/board.py && test ! -e /usr/bin/node",
        "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests",
        f"python3 -c 'import sortedcontainers' && sh <<'ASSAYFIX'\n{fix}ASSAYFIX",
        "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests",
    ]
    turns: list[dict[str, Any]] = [
        {"message": f"Step {i + 1}.",
         "tool_call": {"name": "run_shell_command", "arguments": {"command": cmd}}}
        for i, cmd in enumerate(session)]
    turns.append({"message": "Fixed rank; the tests pass."})
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "leaderboard-rank-007.yaml").write_text(json.dumps({"turns": turns}))
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: image-session
tasks: [tasks]
select: {{split: validation}}
arms:
  agent:
    agent: "qwen:{qwen_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: chat}}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    [adir] = sorted(out.glob("trials/leaderboard-rank-007/agent/*/a1"))
    trial = json.loads((adir / "trial.json").read_text())
    grade = json.loads(next((adir / "grades").glob("*.json")).read_text())
    assert trial["grade"]["accepted"] is True, (grade["failure_code"], trial["execution"])
    assert grade["details"]["integrity"]["changes"]["modified"] == ["src/leaderboard/board.py"]
    assert trial["environment_image"]["digest"] == image.digest
    assert len(agent_cli.ledger(adir)) == len(session) + 1  # the CLI ran the whole session
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["environments"]["leaderboard-rank-007"]["digest"] == image.digest
    assert manifest["identity"]["tasks"]["leaderboard-rank-007"]["environment_image"] == \
        image.digest


def test_resuming_after_a_tasks_image_changed_is_refused(tmp_path: Path,
                                                         example_image: Any) -> None:
    """The task's pin is part of the experiment's identity: a resume whose task now runs in
    another image is refused, naming the change, before any trial starts."""
    _store, image = example_image
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    bundle = tasks / "leaderboard-rank-007"
    shutil.move(pinned_copy(tmp_path, image.digest), bundle)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: image-resume\ntasks: [tasks]\nselect: {split: validation}\n"
                   "arms:\n  base: {agent: oracle}\n")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    [adir] = sorted(out.glob("trials/leaderboard-rank-007/base/*/a1"))
    assert json.loads((adir / "trial.json").read_text())["environment_image"]["digest"] == \
        image.digest
    path = bundle / "task.yaml"
    other = "sha256:" + "2" * 64
    path.write_text(path.read_text().replace(image.digest, other))
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 2, res.stdout + res.stderr
    assert "tasks.leaderboard-rank-007.environment_image" in "".join(res.stderr.split()), \
        res.stderr
    assert len(list(out.glob("trials/leaderboard-rank-007/base/*/a*"))) == 1


def test_the_hosts_node_runs_in_an_image_without_node(tmp_path: Path,
                                                      example_image: Any) -> None:
    """The host's /usr lent read-only, node started through the host's loader and libraries:
    the image has no node, and nothing of the host's /usr is on the image's own paths."""
    from assay.environments.run import host_node, host_node_argv, host_usr_mount, image_root
    from assay.sandbox import run_sandboxed

    if not host_node():
        pytest.skip("the host has no /usr/bin/node to lend")
    store, image = example_image
    assert not (store.rootfs(image.digest) / "usr" / "bin" / "node").exists()
    argv = host_node_argv(["-e", "console.log('node', process.version)"])
    work = tmp_path / "w"
    work.mkdir()
    res = run_sandboxed(["sh", "-c", 'command -v node || echo no-node-on-path; exec "$@"', "sh",
                         *argv], work, image=image_root(image, store),
                        mounts=[host_usr_mount()], record_dir=tmp_path / "rec")
    out = (tmp_path / "rec" / "stdout.log").read_text().splitlines()
    assert res.exit_code == 0, (tmp_path / "rec" / "stderr.log").read_text()
    assert out == ["no-node-on-path", f"node {host_node()['version']}"]


def test_the_builder_seam_builds_a_missing_pin_and_refuses_another_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a builder installed (``assay.environments.build.build_source``: here a small one
    that publishes a real tree into a real store), a pin missing from the store is built; a
    build whose digest is not the pin is refused, naming both."""
    import types

    from assay.environments.run import ensure_image
    from assay.environments.store import ImageStore, tree_digest
    from assay.errors import TrialRefused

    calls: list[Path] = []

    def build_source(path: Path, store: ImageStore, progress: Any) -> Any:
        calls.append(path)
        progress(f"building {path.name}")
        with store.staging() as rootfs:
            (rootfs / "etc").mkdir()
            (rootfs / "etc" / "recipe").write_bytes(path.read_bytes())
            return store.publish(rootfs, source_kind="debian-recipe",
                                 source_digest="sha256:" + "5" * 64, source_label=path.name)

    module = types.ModuleType("assay.environments.build")
    module.build_source = build_source  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "assay.environments.build", module)
    store = ImageStore(tmp_path / "store")
    # the digest this source builds to, computed the way the store does
    expect = tmp_path / "expect"
    (expect / "etc").mkdir(parents=True)
    (expect / "etc" / "recipe").write_bytes((EXAMPLE / "environment" / "recipe.yaml").read_bytes())
    digest = tree_digest(expect)[0]
    bundle = load_bundle(pinned_copy(tmp_path / "a", digest))
    lines: list[str] = []
    image = ensure_image(bundle, store, lines.append)
    assert image is not None and image.digest == digest and store.get(digest) is not None
    assert calls == [bundle.root / "environment" / "recipe.yaml"]
    assert lines == ["building recipe.yaml"]
    assert ensure_image(bundle, store) == image and len(calls) == 1  # stored: no second build
    other = load_bundle(pinned_copy(tmp_path / "b", "sha256:" + "3" * 64))
    with pytest.raises(TrialRefused) as info:
        ensure_image(other, store)
    assert f"gave the image {digest}, not the pinned sha256:{'3' * 64}" in str(info.value)


def test_an_image_cannot_take_the_sandboxs_own_places(tmp_path: Path) -> None:
    """What an image from anyone could hold: an /assay folder (would stop assay's own mounts),
    an /etc/passwd that is a link (a bind over it would follow the link), a working directory
    in /proc or /etc."""
    from assay.sandbox import ImageRoot
    from assay.sandbox.bwrap import _image_args

    root = tmp_path / "rootfs"
    for d in ("assay/host-python", "etc", "usr/bin", "proc", "work"):
        (root / d).mkdir(parents=True)
    (root / "etc" / "group").write_text("root:x:0:\n")
    (root / "etc" / "passwd").symlink_to("/work/owned")
    (root / "bin").symlink_to("usr/bin")
    args = list(_image_args(str(root), "/work"))
    targets = [args[i + 2] for i, a in enumerate(args) if a in ("--ro-bind", "--symlink")]
    assert "/assay" not in targets and "/proc" not in targets
    assert "/etc/passwd" not in targets and "/etc/group" in targets
    assert {"/usr", "/bin", "/work", "/etc"} <= set(targets)
    for bad in ("/proc/self", "/etc", "/tmp/x", "/work/../etc"):
        with pytest.raises(ValueError, match="working directory"):
            ImageRoot(root, bad).validated()
    assert ImageRoot(root, "/").validated().workspace == "/work"
    assert ImageRoot(root, "/srv/app").validated().workspace == "/srv/app"


def test_env_shell_refuses_a_task_whose_image_is_not_built(tmp_path: Path) -> None:
    dest = pinned_copy(tmp_path, "sha256:" + "4" * 64)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"),
           "ASSAY_CACHE_DIR": str(tmp_path / "empty-cache")}
    done = subprocess.run([sys.executable, "-m", "assay", "env", "shell", str(dest)],
                          input="echo never\n", capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "never" not in done.stdout
    err = "".join(done.stderr.split())
    assert "isnotintheimagestore" in err and "assayenvbuild" in err


def test_the_arm_check_leaves_an_images_system_to_the_image(tmp_path: Path) -> None:
    """A ``command:`` arm whose program is not on the host: refused for a task on the host's
    system (the sandbox would not have it), not for a task in its own image (its system is
    the image's; unknown here)."""
    from assay.runner.arm_check import check_arms
    from assay.suites.experiment import load_experiment

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.move(pinned_copy(tmp_path, "sha256:" + "6" * 64), tasks / "leaderboard-rank-007")
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: arm-check\ntasks: [tasks]\nselect: {split: validation}\n"
                   "arms:\n  mine: {agent: 'command:frobnicate-leaderboard --fix'}\n")
    assert check_arms(load_experiment(exp)) == []
    path = tasks / "leaderboard-rank-007" / "task.yaml"
    text = path.read_text().replace("image: environment/recipe.yaml, ", "")
    path.write_text(re.sub(r"  environment_image: \S+\n", "", text))
    problems = check_arms(load_experiment(exp))
    assert len(problems) == 1 and "frobnicate-leaderboard" in str(problems[0])
    assert "not on the sandbox's PATH" in str(problems[0])
