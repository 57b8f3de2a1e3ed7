"""An image build's steps are never the host's root: what a step is on the host, what it sees,
and what it leaves on disk (``assay.environments.build_sandbox.build_users``).

A step (a Dockerfile's ``RUN`` line, a recipe's shell line) is the task author's code. Run as
root (CI, these machines), assay maps the build's ids 0-65535 onto the host's ``BASE + n`` and
shows the staging folder through a writable idmapped mount. These tests run a step in a hard-
linked copy of the shared base image (new files only: the shared image's own files are never
written) and look at it from both sides: inside it is uid 0 and may ``chown`` to any id of the
image; on the host its process is uid ``BASE``; a 0600 file of the host's root lent to it is
closed to it, while the recipe's own folder (a checkout made under umask 077) reads as a
container's root reads it; what it made is owned by 0 and 42 on disk, as the image says. The
fallback (no range can be mapped) is shown too: the step is then the host's root, and the
image's record says so. Under a CPU-second and about 6 s of wall time (most of it the steps'
sleeps the host watches for); there is no longer form.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.images import base_image, require_mmdebstrap

from assay.environments import build_sandbox
from assay.environments.build_sandbox import (
    DEFAULT_PATH,
    BuildUsers,
    build_users,
    lent_context,
    run_in_root,
)
from assay.sandbox.userns import mapped_userns

#: What the step sleeps for: the test finds its process on the host by this argument.
MARK = "1.217"

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="a build maps a range of ids only when assay runs as "
                                       "root; otherwise bubblewrap maps the one building user")


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[Path]:
    """A staging folder holding the shared base image as hard links (the step makes new files
    only), removed afterwards."""
    require_mmdebstrap()
    store, image = base_image()
    root = tmp_path / "staging"
    done = subprocess.run(["cp", "-al", "--", str(store.rootfs(image.digest)), str(root)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    yield root
    subprocess.run(["rm", "-rf", "--", str(root)], check=False)


def _host_uids_of_marked_sleep(found: dict[str, str], stop: threading.Event) -> None:
    """Watch /proc for the step's ``sleep MARK`` and keep its Uid line as the host sees it."""
    want = f"sleep\0{MARK}\0".encode()
    while not stop.is_set() and "uid" not in found:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes() != want:
                    continue
                for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                    if line.startswith(("Uid:", "Gid:")):
                        found[line[:3].lower()] = line.split()[1]
            except OSError:
                continue
        time.sleep(0.02)


def _step(root: Path, ids: BuildUsers | None, script: str,
          ro_binds: tuple[tuple[Path, str], ...] = ()) -> tuple[list[str], dict[str, str]]:
    """Run ``script`` as a build step in ``root``; its output lines and its host uid/gid."""
    found: dict[str, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_host_uids_of_marked_sleep, args=(found, stop))
    watcher.start()
    try:
        run = run_in_root(root, ["/bin/sh", "-c", script], env={"PATH": DEFAULT_PATH},
                          network=False, ro_binds=ro_binds, timeout=120, userns=ids)
    finally:
        stop.set()
        watcher.join()
    assert run.ok, run.tail
    return run.tail, found


STEP = f"""
id -u; id -g
touch /made-by-step
mkdir /var/by-apt && chown 42:42 /var/by-apt && echo chowned
cat /mnt/host-secret/key 2>&1 || true
cat /mnt/context/notes.txt 2>&1 || true
sleep {MARK}
"""


def _host_secret(tmp_path: Path) -> Path:
    folder = tmp_path / "secret"
    folder.mkdir()
    (folder / "key").write_text("the host root's\n")
    (folder / "key").chmod(0o600)
    folder.chmod(0o755)
    return folder


def _context(tmp_path: Path) -> Path:
    """A recipe's folder as a checkout under umask 077 leaves it."""
    folder = tmp_path / "recipe"
    folder.mkdir(mode=0o700)
    (folder / "notes.txt").write_text("copied from the recipe's folder\n")
    (folder / "notes.txt").chmod(0o600)
    return folder


def test_a_step_is_the_builds_root_inside_and_an_unprivileged_uid_on_the_host(
        staging: Path, tmp_path: Path) -> None:
    users, why = mapped_userns()
    if users is None:
        pytest.skip(f"this machine cannot map a range of ids: {why}")
    users.close()
    secret, context = _host_secret(tmp_path), _context(tmp_path)
    with build_users(staging) as ids:
        assert ids is not None and ids.users is not None, "the range could be mapped"
        assert ids.view is not None and ids.view != staging
        base = ids.users.uid_base
        assert "never the host's root" in ids.note and str(base) in ids.note
        for point in ("mnt/host-secret", "mnt/context"):
            (staging / point).mkdir(parents=True)
        with lent_context(context, ids) as shown:
            assert shown != context  # the idmapped view, not the folder itself
            tail, host = _step(staging, ids, STEP, ro_binds=((secret, "/mnt/host-secret"),
                                                             (shown, "/mnt/context")))
    assert tail[:3] == ["0", "0", "chowned"], tail
    assert "Permission denied" in tail[3], tail  # the host root's 0600 file stays closed
    assert tail[4] == "copied from the recipe's folder", tail
    assert host == {"uid": str(base), "gid": str(ids.users.gid_base)}, host
    made, chowned = (staging / "made-by-step").stat(), (staging / "var/by-apt").stat()
    assert (made.st_uid, made.st_gid) == (0, 0)  # owned on disk as the image says
    assert (chowned.st_uid, chowned.st_gid) == (42, 42)
    # the views are gone with the build
    assert not ids.view.exists() or not os.path.ismount(ids.view)


def test_where_no_range_can_be_mapped_the_step_is_root_and_the_record_says_so(
        staging: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if subprocess.run(["which", "unshare", "nsenter"], capture_output=True).returncode:
        pytest.skip("unshare and nsenter (util-linux) are needed for the fallback namespace")
    monkeypatch.setattr(build_sandbox, "mapped_userns",
                        lambda: (None, "the kernel refused the id maps (for this test)"))
    with build_users(staging) as ids:
        assert ids is not None and ids.users is None and ids.identity is not None
        assert "host's root" in ids.note and "for this test" in ids.note
        with lent_context(staging, ids) as shown:
            assert shown == staging  # nothing to shift: shown as it is
        tail, host = _step(staging, ids, f"id -u; sleep {MARK}")
    assert tail[0] == "0"
    assert host["uid"] == "0"
