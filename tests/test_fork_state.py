"""A fork's frozen state restores as it was frozen (records/fork.py), on real files and a real
tar: the modes a checkout under umask 002 gives (group-writable files and folders) come back,
so an arm's copy has the prefix's digest and its protected files read as unchanged; the bits
that would grant privileges (setuid, setgid) do not."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from assay.records.fork import digests, freeze_state, restore_state


def _tree(root: Path) -> tuple[Path, Path]:
    workspace, home = root / "workspace", root / "home"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_calc.py").write_text("def test_add():\n    assert True\n")
    (home / ".local" / "share").mkdir(parents=True)
    (home / ".local" / "share" / "session.json").write_text(json.dumps({"nonce": 7}))
    return workspace, home


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode)
            for p in sorted(root.rglob("*"))}


def test_group_and_other_write_bits_come_back_and_the_digest_holds(tmp_path: Path) -> None:
    workspace, home = _tree(tmp_path / "live")
    for p in [*workspace.rglob("*"), *home.rglob("*")]:
        p.chmod(0o775 if p.is_dir() else 0o664)  # a checkout under umask 002
    (workspace / "tests" / "test_calc.py").chmod(0o666)
    frozen = freeze_state(workspace, home, tmp_path)
    before = {"workspace": _modes(workspace), "home": _modes(home)}

    target = tmp_path / "arm"
    target.mkdir()
    (target / "workspace").mkdir()
    (target / "workspace" / "stale.txt").write_text("replaced by the restore")
    restored = restore_state(tmp_path, frozen["tar_sha256"], target / "workspace",
                             target / "home")
    assert restored["state_digest"] == frozen["state_digest"]
    assert {"workspace": _modes(target / "workspace"), "home": _modes(target / "home")} == before
    assert _modes(target / "workspace")["tests/test_calc.py"] == 0o666
    assert not (target / "workspace" / "stale.txt").exists()


def test_setuid_and_setgid_bits_are_not_restored(tmp_path: Path) -> None:
    workspace, home = _tree(tmp_path / "live")
    tool = workspace / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o6775)
    if stat.S_IMODE(tool.stat().st_mode) & (stat.S_ISUID | stat.S_ISGID) == 0:
        raise AssertionError("this file system did not keep the set-id bits to begin with")
    frozen = freeze_state(workspace, home, tmp_path)
    target = tmp_path / "arm"
    target.mkdir()
    restored = restore_state(tmp_path, frozen["tar_sha256"], target / "workspace",
                             target / "home")
    # the privilege bits are gone, the write bits stay
    assert stat.S_IMODE((target / "workspace" / "tool").stat().st_mode) == 0o775
    assert digests(target / "workspace", target / "home") == restored
