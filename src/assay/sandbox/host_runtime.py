"""Host programs lent to a sandbox that runs in an image: the host's ``/usr`` read-only at
:data:`HOST_USR_MOUNT`, and a host-built program started through the host's dynamic loader
with the host's library path, so it finds the host's C library whatever the image has.

Only the process started that way uses the host's libraries: what it ``exec``-s (the agent's
command after the model-proxy forwarder hands over) uses the image's own. A program started
through the loader sees the loader as ``/proc/self/exe``; programs that relaunch themselves
through it (node CLIs that restart with other flags) cannot be started this way.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from assay.sandbox.bwrap import Mount

#: Where the host's /usr appears in an image's sandbox.
HOST_USR_MOUNT = "/assay/host/usr"
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/lib64")


def inside(path: str | Path, mount: str = HOST_USR_MOUNT) -> str:
    """A host path under /usr as the sandbox sees it under ``mount`` (the build sandbox lends
    /usr elsewhere: :mod:`assay.environments.build_sandbox`)."""
    text = str(path)
    if not text.startswith("/usr/"):
        raise ValueError(f"{text} is not under /usr")
    return mount + text[len("/usr"):]


@functools.lru_cache(maxsize=4)
def host_loader(mount: str = HOST_USR_MOUNT) -> dict[str, str]:
    """The host's dynamic loader and library path as the sandbox sees them with /usr at
    ``mount`` (``{}`` when the host's loader is not under /usr)."""
    loaders = sorted(Path("/usr/lib64").glob("ld-linux*.so*")) + sorted(
        Path("/usr/lib").glob("*/ld-linux*.so*"))
    found = [p.resolve() for p in loaders if str(p.resolve()).startswith("/usr/")]
    if not found:
        return {}
    libdirs = [d for d in _LIB_DIRS if os.path.isdir(d)]
    return {"loader": inside(found[0], mount),
            "library_path": ":".join(inside(d, mount) for d in libdirs), "mount": mount}


def host_usr_mount() -> Mount:
    """The host's /usr, read-only at :data:`HOST_USR_MOUNT`."""
    return Mount(Path("/usr"), HOST_USR_MOUNT)


def loader_argv(argv: list[str], at: int, mount: str = HOST_USR_MOUNT) -> list[str] | None:
    """``argv`` with ``argv[at]`` started through the host's loader (None: no loader)."""
    found = host_loader(mount)
    if not found:
        return None
    return [*argv[:at], found["loader"], "--library-path", found["library_path"], *argv[at:]]


def host_python_argv(mount: str = HOST_USR_MOUNT) -> list[str] | None:
    """The host's system python3 started through the host's loader inside an image (its
    standard library found from its own path under ``mount``), or None."""
    real = os.path.realpath("/usr/bin/python3")
    if not real.startswith("/usr/") or not os.access(real, os.X_OK):
        return None
    return loader_argv([inside(real, mount)], 0, mount)
