"""Run directories under a root (``--out-root``): named by suite, model and UTC time, claimed
by an atomic ``mkdir`` so that two jobs started in the same second (a cron line and a CI retry)
never share, overwrite or resume each other's run.

The name is ``<suite>-<model>-<UTC stamp>``; a taken name gets ``-2``, ``-3``, … The claimed
directory is empty: the run writers accept an empty directory as a new run.
"""

from __future__ import annotations

import re
from pathlib import Path

from assay.errors import InputError
from assay.records.layout import run_stamp

MAX_TRIES = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_part(text: str, limit: int = 80) -> str:
    """A name made path-safe (``Qwen/Qwen2.5-7B`` → ``Qwen_Qwen2.5-7B``), never empty or dots."""
    part = _UNSAFE.sub("_", text).strip("_.")[:limit]
    return part or "x"


def claim_run_dir(root: Path, suite: str, model: str, *, stamp: str | None = None) -> Path:
    """Create and return a new, empty run directory under ``root`` (created if missing)."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out-root {root}: cannot be created: {exc}") from None
    if not root.is_dir():
        raise InputError(f"--out-root {root}: not a directory")
    base = f"{safe_part(suite)}-{safe_part(model)}-{stamp or run_stamp()}"
    for n in range(1, MAX_TRIES + 1):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"--out-root {root}: cannot create {path.name}: {exc}") from None
        return path
    raise InputError(f"--out-root {root}: {MAX_TRIES} runs named {base} already exist")


def release_unused(path: Path) -> None:
    """Remove a claimed directory that stayed empty (the run was refused before writing):
    bad input leaves no run directory behind. A directory with anything in it is kept."""
    try:
        path.rmdir()
    except OSError:
        pass
