"""Users in the sandbox (issue 33): ``environment.users: several`` maps ids 0-65535 into the
sandbox's user namespace, so a task's tests can drop to ``nobody`` as they would in a container,
and file modes mean what they mean there; and, run as root, no sandbox ever holds the host's
root: its ids are unprivileged host ids from BASE (``assay.sandbox.userns``).

The image is the tests' shared Debian bookworm image (``tests/support/images.py``: python3 and
pytest, built once and kept). The task is made here: its hidden test (0600 like its solution,
as a checkout under umask 077 leaves them) reads a public file and an answer key as ``nobody``
(``subprocess.run(user="nobody")``); the reference solution makes the key 0600, so nobody cannot
read it and the test passes; nop leaves it 0644 and fails. With one user the same ``setuid``
fails (``EPERM``: no capability). What a sandbox makes in its workspace belongs to host uid
BASE (root) or BASE + 1000 (the one user), and a 0600 file of the host's root mounted read-only
is unreadable even to sandbox root, in an image and on the host's system; the image's own files
keep their owners (an idmapped view). Each check is one short execution (about 0.03 CPU-s).

The fallback (a machine that cannot map a range: assay not running as root) cannot exist on
this root test machine, so one test makes :func:`os.geteuid` answer 1000 inside
``assay.sandbox.userns`` and checks that the sandbox says so and keeps one user (bubblewrap's
own mapping onto the caller); that is the only stand-in here. No full form.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.images import BASE_RECIPE, base_image, cache_dir

from assay.agents import parse_agent
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available, run_sandboxed
from assay.suites.bundle import load_bundle

pytestmark = [
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mapping a range of ids needs root here "
                       "(newuidmap from /etc/subuid is not supported yet)"),
]

HIDDEN = '''\
import subprocess
from pathlib import Path

KEYS = Path("src/keys")


def as_nobody(path):
    return subprocess.run(["cat", str(path)], user="nobody", capture_output=True, text=True)


def test_nobody_reads_the_public_file():
    got = as_nobody(KEYS / "public.txt")
    assert got.returncode == 0 and got.stdout == "hello\\n", got.stderr


def test_nobody_cannot_read_the_answer_key():
    got = as_nobody(KEYS / "answer.txt")
    assert got.returncode != 0 and "Permission denied" in got.stderr, got
    assert (KEYS / "answer.txt").read_text() == "42\\n"  # its owner, root, still can
'''


def _task(root: Path, digest: str, *, users: str = "several") -> Path:
    bundle = root / "bundle"
    keys = bundle / "repo" / "src" / "keys"
    keys.mkdir(parents=True)
    (keys / "public.txt").write_text("hello\n")
    (keys / "answer.txt").write_text("42\n")
    for name in ("public.txt", "answer.txt"):
        (keys / name).chmod(0o644)
    (bundle / "tests").mkdir()
    (bundle / "tests" / "test_keys.py").write_text(HIDDEN)
    # as a checkout under umask 077 leaves it: the verifier's copy is still readable to the
    # sandbox's root, which is not the host's root that owns the copy
    (bundle / "tests" / "test_keys.py").chmod(0o600)
    (bundle / "solution").mkdir()
    (bundle / "solution" / "solve.sh").write_text("#!/bin/sh\nchmod 600 src/keys/answer.txt\n")
    (bundle / "solution" / "solve.sh").chmod(0o600)  # umask 077 too: the oracle's copy reads
    (bundle / "environment").mkdir()
    (bundle / "environment" / "recipe.yaml").write_text(BASE_RECIPE)
    (bundle / "instruction.md").write_text("Make src/keys/answer.txt readable by its owner "
                                           "only.\n")
    (bundle / "task.yaml").write_text(f"""\
id: answer-key-users
revision: 1
split: validation
instruction: instruction.md
initial_state:
  repository: repo
  environment: {{image: environment/recipe.yaml, users: {users}, requires: [python3, pytest]}}
  environment_image: {digest}
budget: {{agent_wall_seconds: 60, verifier_wall_seconds: 60}}
acceptance:
  verifier_revision: v1
  required: [behavior, integrity]
  behavior:
    command: "PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider \\
      $ASSAY_TESTS/test_keys.py"
  allowed_paths: ["src/**"]
""")
    return bundle


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Any:
    store, image = base_image()
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(cache_dir(store)))
    return store, image


def _grade(trial: Path) -> dict[str, Any]:
    return json.loads((trial / "grades" / "v1.json").read_text())


def test_a_hidden_test_that_drops_to_nobody_passes_the_oracle_and_fails_nop(
        tmp_path: Path, shared: Any) -> None:
    _store, image = shared
    bundle = load_bundle(_task(tmp_path, image.digest))
    oracle = run_trial(bundle, parse_agent("oracle"), tmp_path / "oracle")
    assert oracle.status == "graded", oracle.error
    grade = _grade(tmp_path / "oracle")
    assert grade["accepted"] is True, grade
    nop = run_trial(bundle, parse_agent("nop"), tmp_path / "nop")
    assert nop.status == "graded", nop.error
    grade = _grade(tmp_path / "nop")
    assert grade["accepted"] is False and grade["checks"]["behavior"] == "fail", grade


def _ids(tmp_path: Path, image: Any, store: Any, *, several: bool) -> Any:
    from assay.environments.run import image_root

    work = tmp_path / ("several" if several else "one")
    work.mkdir()
    script = ("import os, subprocess\n"
              "print(os.getuid(), open('/proc/self/uid_map').read().split())\n"
              "open('made', 'w').close()\n"
              "try:\n"
              "    r = subprocess.run(['id', '-un'], user='nobody', capture_output=True,"
              " text=True)\n"
              "    print(r.stdout.strip())\n"
              "except OSError as exc:\n"
              "    print('error', exc.errno)\n")
    return run_sandboxed(["python3", "-c", script], work,
                         image=image_root(image, store, several_users=several))


def test_one_user_cannot_switch_and_several_users_switch(tmp_path: Path,
                                                         shared: Any) -> None:
    from assay.sandbox.userns import RANGE, mapped_userns

    users, why = mapped_userns()
    assert users is not None, why
    users.close()
    store, image = shared
    one = _ids(tmp_path, image, store, several=False)
    assert one.exit_code == 0, one.stderr_tail
    assert one.stdout_tail.splitlines()[-1] == "error 1"  # EPERM: no capability to switch
    several = _ids(tmp_path, image, store, several=True)
    assert several.exit_code == 0, several.stderr_tail
    first, second = several.stdout_tail.splitlines()[-2:]
    # sandbox ids 0..65535 are the setup namespace's 1..65536 (host BASE..BASE+65535)
    assert first == f"0 ['0', '1', '{RANGE}']", first
    assert second == "nobody"
    assert not several.warnings
    # what each made in its workspace belongs to an unprivileged host id, never to root
    assert (tmp_path / "one" / "made").stat().st_uid == users.uid_base + 1000
    assert (tmp_path / "several" / "made").stat().st_uid == users.uid_base
    assert (tmp_path / "several" / "made").stat().st_gid == users.gid_base


SECRET_PROBE = """\
import os, sys
print(os.getuid(), open("/proc/self/uid_map").read().split())
open("made-by-" + str(os.getuid()), "w").close()
try:
    print(open("/assay/secret").read())
except OSError as exc:
    print(type(exc).__name__, exc.errno)
print(os.stat("/usr").st_uid, os.stat("/usr").st_gid)
print([line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0])
"""


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.write_text("the host root's\n")
    secret.chmod(0o600)
    assert secret.stat().st_uid == 0
    return secret


def test_sandbox_root_is_not_the_hosts_root(tmp_path: Path, shared: Any) -> None:
    """Root in the sandbox is an unprivileged host uid: what it makes in the workspace belongs
    to that uid, and a 0600 file of the host's root, mounted read-only, stays unreadable to it
    with all a container root's capabilities; the image's own root files look root's."""
    from assay.environments.run import image_root
    from assay.sandbox.bwrap import Mount
    from assay.sandbox.userns import mapped_userns

    users, why = mapped_userns()
    assert users is not None, why
    users.close()
    store, image = shared
    work = tmp_path / "work"
    work.mkdir()
    got = run_sandboxed(["python3", "-c", SECRET_PROBE], work,
                        mounts=[Mount(_secret(tmp_path), "/assay/secret")],
                        image=image_root(image, store, several_users=True))
    assert got.exit_code == 0, got.stderr_tail
    ids, secret, usr, caps = got.stdout_tail.splitlines()[-4:]
    assert caps != "0000000000000000"  # a container root's capabilities, over mapped ids
    assert ids.startswith("0 ")
    assert secret == "PermissionError 13"
    assert usr == "0 0"  # the store's root-owned /usr, seen through the idmapped view
    made = (work / "made-by-0").stat()
    assert made.st_uid == users.uid_base != 0 and made.st_gid == users.gid_base != 0
    assert work.stat().st_uid == users.uid_base  # handed over before the execution


def test_the_host_systems_sandbox_user_is_not_the_hosts_root(tmp_path: Path) -> None:
    """The same without an image (the host's system, one user): sandbox uid 1000 is the host's
    BASE + 1000, and the host root's 0600 file is unreadable to it."""
    from assay.sandbox.bwrap import Mount
    from assay.sandbox.userns import mapped_userns

    users, why = mapped_userns()
    assert users is not None, why
    users.close()
    work = tmp_path / "work"
    work.mkdir(mode=0o700)  # as mkdtemp makes them: the sandbox user's once handed over
    got = run_sandboxed(["python3", "-c", SECRET_PROBE], work,
                        mounts=[Mount(_secret(tmp_path), "/assay/secret")])
    assert got.exit_code == 0, got.stderr_tail
    ids, secret, _usr, caps = got.stdout_tail.splitlines()[-4:]
    assert ids.startswith("1000 ") and secret == "PermissionError 13"
    assert caps == "0000000000000000"  # no capability at all
    assert (work / "made-by-1000").stat().st_uid == users.uid_base + 1000


def test_where_no_range_can_be_mapped_one_user_is_kept_and_said(
        tmp_path: Path, shared: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.sandbox import userns

    store, image = shared
    monkeypatch.setattr(userns, "_state", {})
    monkeypatch.setattr(userns.os, "geteuid", lambda: 1000)
    got = _ids(tmp_path, image, store, several=True)
    assert got.exit_code == 0, got.stderr_tail
    assert got.stdout_tail.splitlines()[-1] == "error 22"  # EINVAL: nobody is not mapped
    assert any("several users asked for, one mapped: assay does not run as root" in w
               for w in got.warnings), got.warnings
    # today's single mapping, kept: bubblewrap maps the sandbox user onto the caller
    assert (tmp_path / "several" / "made").stat().st_uid == os.getuid()


def test_the_user_namespaces_are_made_once_a_process() -> None:
    from assay.sandbox.userns import mapped_userns

    first, why = mapped_userns()
    second, _ = mapped_userns()
    assert first is not None and second is not None, why
    try:
        for a, b in ((first.setup_fd, second.setup_fd), (first.final_fd, second.final_fd)):
            assert os.readlink(f"/proc/self/fd/{a}") == os.readlink(f"/proc/self/fd/{b}")
        ours = subprocess.run(["readlink", "/proc/self/ns/user"], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert os.readlink(f"/proc/self/fd/{first.setup_fd}") != ours
        assert os.readlink(f"/proc/self/fd/{first.final_fd}") not in (
            ours, os.readlink(f"/proc/self/fd/{first.setup_fd}"))
    finally:
        first.close()
        second.close()


def test_several_users_without_an_image_is_refused_at_load(tmp_path: Path) -> None:
    from assay.errors import SuiteError

    bundle = _task(tmp_path, "sha256:" + "0" * 64)
    path = bundle / "task.yaml"
    text = path.read_text().replace("image: environment/recipe.yaml, ", "")
    path.write_text(text.replace("  environment_image: sha256:" + "0" * 64 + "\n", ""))
    with pytest.raises(SuiteError, match="environment.users: several needs an image"):
        load_bundle(bundle)


def test_hand_over_changes_links_never_what_they_point_at(tmp_path: Path) -> None:
    """The work directory may hold what a sandbox made: a link to a host file must not make
    the host file the sandbox user's; files of mapped ids keep their owners."""
    from assay.sandbox.userns import hand_over, mapped_userns

    users, why = mapped_userns()
    assert users is not None, why
    users.close()
    outside = tmp_path / "outside"
    outside.write_text("the host's\n")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "file").write_text("x")
    (work / "link").symlink_to(outside)
    (work / "nobodys").write_text("y")
    os.chown(work / "nobodys", users.uid_base + 65534, users.gid_base + 65534)
    hand_over([work], users, 1000, 1000)
    mine = (users.uid_base + 1000, users.gid_base + 1000)
    for path in (work, work / "sub", work / "sub" / "file"):
        assert (path.stat().st_uid, path.stat().st_gid) == mine
    assert (work / "link").lstat().st_uid == mine[0]
    assert outside.stat().st_uid == 0  # never followed
    assert (work / "nobodys").stat().st_uid == users.uid_base + 65534  # a mapped id's: kept
