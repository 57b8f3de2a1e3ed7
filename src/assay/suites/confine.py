"""Keeping a bundle's paths inside its folder.

A task bundle is handed around (a colleague's branch, an imported benchmark, a pull request from
anyone), and each path in its ``task.yaml`` names a file that assay reads on the host and gives
to the agent or the verifier: the instruction becomes the model's prompt, the starting tree is
copied into the workspace, ``tests/`` and ``solution/`` are mounted for the verifier. A path
that leaves the bundle (``instruction: ../../etc/passwd``, an absolute ``/etc/shadow``, an
``instruction.md`` that is a symbolic link to a host file, or a link inside the starting tree
to ``~/.ssh``) would hand a host file to the agent and to the model's provider. So every such
path must resolve, after symbolic links, inside the bundle folder; a link anywhere in the
starting tree, ``tests/`` or ``solution/`` must point inside it too. Checked at load, where a
refusal costs nothing: before any copy, any trial, any file written.
"""

from __future__ import annotations

import os
from pathlib import Path

from assay.suites.errors import Problem


def real(path: Path) -> Path | None:
    """``path`` with every symbolic link resolved (missing parts kept as written), or None
    for a link loop."""
    try:
        return path.resolve()
    except (RuntimeError, OSError, ValueError):  # a link loop (RuntimeError up to 3.12), a NUL
        return None


def path_problem(root: Path, written: str, *, at: Path, line: int | None,
                 field: str | None) -> Problem | None:
    """Why ``written`` (a path as written in ``at``, relative to the bundle folder ``root``)
    does not stay inside the bundle, as a problem at ``at``/``line``/``field``; None when it
    does."""
    top = real(root) or root.absolute()
    if "\0" in written:
        return Problem(at, line, field, "a path may not contain a NUL byte")
    if Path(written).is_absolute():
        return Problem(at, line, field, f"{written!r} is an absolute path: paths in task.yaml "
                       "are relative to the bundle folder and stay inside it")
    lexical = Path(os.path.normpath(top / written))
    if not lexical.is_relative_to(top):
        return Problem(at, line, field, f"{written!r} leads outside the bundle folder {top} "
                       "(through '..'): refused")
    target = real(top / written)
    if target is None:
        return Problem(at, line, field, f"{written!r} is a symbolic link loop")
    if not target.is_relative_to(top):
        return Problem(at, line, field, f"{written!r} resolves to {target}, outside the bundle "
                       f"folder {top} (through a symbolic link): refused")
    return None


def links_out(root: Path, tree: Path, *, at: Path, line: int | None, field: str,
              limit: int = 20) -> list[Problem]:
    """A problem for every symbolic link under ``tree`` whose target resolves outside the
    bundle folder ``root`` (or loops), at most ``limit`` of them; the walk never follows a
    link."""
    top = real(root) or root.absolute()
    problems: list[Problem] = []
    for dirpath, dirnames, filenames in os.walk(tree, followlinks=False):
        for name in sorted(dirnames + filenames):
            link = Path(dirpath) / name
            if not link.is_symlink():
                continue
            target = real(link)
            if target is not None and target.is_relative_to(top):
                continue
            shown = os.readlink(link)
            why = ("is a symbolic link loop" if target is None else
                   f"is a symbolic link to {shown!r}, outside the bundle folder {top}")
            problems.append(Problem(at, line, field, f"{link} {why}: refused"))
            if len(problems) >= limit:
                return problems
    return problems
