"""The shell of ``assay env shell TASK``: an interactive shell in a task's environment, the way
a task author debugs it.

The shell runs in the same sandbox the agent and the verifier get (the task's pinned image as
its root, no network, the sandbox's own uid), with a scratch copy of the task's starting tree
as the workspace (cwd, at the image's working directory) and the hidden tests read-only at
``$ASSAY_TESTS``. Nothing the shell does reaches the bundle: the copy is removed on exit.
``/bin/bash`` when the image has it, else ``/bin/sh``; stdin, stdout and stderr are the
caller's (or a pipe: ``echo 'pytest -q' | assay env shell TASK`` runs unattended).

The shell has no controlling terminal: the sandbox always starts a new session, so that
nothing in it can push keystrokes into the terminal it was started from (``TIOCSTI``), which
matters for a task written by someone else. Job control is therefore off and Ctrl-C cannot
reach a command in the shell; it is ignored here (rather than ending the sandbox with assay),
and ``exit`` or Ctrl-D leaves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path


def open_env_shell(task: Path, *, network: bool = False) -> int:
    """Run the shell until it exits; its exit status."""
    from assay.environments.run import task_root
    from assay.environments.seed import seed_from_image
    from assay.grading.verify.canaries import TESTS_MOUNT
    from assay.sandbox import Mount, check_bwrap
    from assay.sandbox.bwrap import (
        DEFAULT_PATH,
        SANDBOX_TMP,
        bwrap_argv,
        bwrap_executable,
        bwrap_options,
        options_fd,
        sandbox_env,
    )
    from assay.suites.bundle import load_bundle

    bundle = load_bundle(task)
    image = task_root(bundle, build=False)  # a shell never starts a build of minutes
    check_bwrap()
    bwrap = bwrap_executable()
    assert bwrap is not None
    workspace_at = image.workspace if image is not None else "/work"
    rootfs = image.rootfs if image is not None else Path("/")
    shell = "/bin/bash" if (rootfs / "bin" / "bash").exists() else "/bin/sh"
    with tempfile.TemporaryDirectory(prefix="assay-env-shell-") as tmp:
        work = Path(tmp) / "work"
        bundle.export_starting_tree(work)
        seed_from_image(bundle, work)  # as a trial's workspace starts
        mounts = []
        if bundle.tests_dir.is_dir():
            mounts.append(Mount(bundle.tests_dir.resolve(), TESTS_MOUNT).validated(workspace_at))
        env = sandbox_env({"ASSAY_TESTS": TESTS_MOUNT, "ASSAY_TASK_ID": bundle.id,
                           "PS1": f"[{bundle.id}] \\w$ ",
                           **({"TERM": os.environ["TERM"]} if "TERM" in os.environ else {})},
                          home=workspace_at, tmpdir=SANDBOX_TMP,
                          base=dict(image.env) if image is not None else None)
        opts = bwrap_options(workdir=work, env=env, mounts=mounts,
                             network="host" if network else "none", tmp_bytes=512 << 20,
                             status_fd=None, image=image)
        fd = options_fd(opts)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by bwrap too
        try:
            done = subprocess.run(bwrap_argv(bwrap, fd, [shell]), pass_fds=(fd,),
                                  env={"PATH": DEFAULT_PATH}, check=False)
        finally:
            signal.signal(signal.SIGINT, previous)
            os.close(fd)
        subprocess.run(["chmod", "-R", "u+rwX", str(work)], capture_output=True, check=False)
    return done.returncode
