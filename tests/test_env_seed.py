"""What a task's image holds where the workspace is mounted becomes part of the starting tree
(``assay.environments.seed``): files a Dockerfile's ``RUN`` lines wrote into ``WORKDIR`` at
build time, which Harbor tasks read (four of a sample of public Harbor tasks failed without it).

The images here are real store entries (``ImageStore.staging`` + ``publish``) whose root
filesystems the test writes by hand, so every kind of entry can be placed, a FIFO and a set-id
file among them; no build runs. The end-to-end case, a Dockerfile ``RUN`` line whose file the
oracle reads, is ``examples/harbor-tasks/latency-summary`` through ``task check``
(``tests/test_harbor_images.py``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from support.bundles import make_bundle

from assay.environments.seed import seed_from_image
from assay.environments.store import ImageStore
from assay.errors import TrialRefused
from assay.records.environment import ImageConfig
from assay.suites.bundle import Bundle, load_bundle


def _image(store: ImageStore, work: dict[str, str], workdir: str = "/work") -> str:
    """Publish an image whose ``workdir`` holds ``work`` (relative path -> text) and an
    ``/etc/os-release``; its digest."""
    with store.staging() as rootfs:
        base = rootfs / workdir.lstrip("/")
        base.mkdir(parents=True)
        for rel, text in work.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
        (rootfs / "etc").mkdir()
        (rootfs / "etc" / "os-release").write_text("ID=debian\n")
        image = store.publish(rootfs, source_kind="debian-recipe",
                              source_digest="sha256:" + "0" * 64,
                              config=ImageConfig(workdir=workdir))
    return image.digest


def _bundle(root: Path, digest: str) -> Path:
    bundle = make_bundle(root)
    y = bundle / "task.yaml"
    (bundle / "environment").mkdir()
    (bundle / "environment" / "recipe.yaml").write_text("suite: bookworm\npackages: [python3]\n")
    text = re.sub(r"  environment: \{requires: \[([^]]*)\]\}",
                  rf"  environment: {{image: environment/recipe.yaml, requires: [\1]}}\n"
                  rf"  environment_image: {digest}", y.read_text())
    y.write_text(text)
    return bundle


def _task_tree(tmp_path: Path, digest: str, name: str = "tree") -> tuple[Bundle, Path]:
    """The task pinned to ``digest`` (:func:`_bundle`), and its starting tree exported to
    ``tmp_path / name``, not yet seeded."""
    bundle = load_bundle(_bundle(tmp_path / "b", digest))
    tree = tmp_path / name
    bundle.export_starting_tree(tree)
    return bundle, tree


def test_build_time_files_join_the_tree_and_the_trees_own_files_win(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "cache" / "environments")
    digest = _image(store, {"logs/service.log": "started\n",
                            "src/calc/__init__.py": "the image's copy, older\n",
                            "src/calc/generated.py": "TABLE = 1\n"})
    bundle, tree = _task_tree(tmp_path, digest)
    ours = (tree / "src" / "calc" / "__init__.py").read_text()
    seeded = seed_from_image(bundle, tree, store)
    assert seeded.paths == ["logs/service.log", "src/calc/generated.py"]
    assert seeded.bytes == len("started\n") + len("TABLE = 1\n")
    assert (tree / "logs" / "service.log").read_text() == "started\n"
    assert (tree / "src" / "calc" / "generated.py").read_text() == "TABLE = 1\n"
    assert (tree / "src" / "calc" / "__init__.py").read_text() == ours  # pinned: it wins
    # a second seeding of the same tree adds nothing (every place that makes a starting tree
    # calls it once, on a fresh export)
    assert seed_from_image(bundle, tree, store).paths == []


def test_each_kind_of_entry_is_copied_as_a_starting_tree_holds_it(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "cache" / "environments")
    with store.staging() as rootfs:
        work = rootfs / "app"
        (work / "bin").mkdir(parents=True)
        tool = work / "bin" / "tool"
        tool.write_text("#!/bin/sh\n")
        os.chmod(tool, 0o4755)  # set-user-id: never into a workspace
        os.mkfifo(work / "pipe")  # a FIFO would block whoever reads the tree
        (work / "latest").symlink_to("bin/tool")
        (work / "passwd").symlink_to("/etc/passwd")  # a link out: copied as a link, not read
        (work / "empty").mkdir()
        image = store.publish(rootfs, source_kind="debian-recipe",
                              source_digest="sha256:" + "1" * 64,
                              config=ImageConfig(workdir="/app"))
    bundle, tree = _task_tree(tmp_path, image.digest)
    seeded = seed_from_image(bundle, tree, store)
    assert seeded.paths == ["bin/tool", "latest", "passwd"]
    mode = os.lstat(tree / "bin" / "tool").st_mode
    assert stat.S_IMODE(mode) == 0o755 and not mode & (stat.S_ISUID | stat.S_ISGID)
    assert not os.path.lexists(tree / "pipe")
    assert os.readlink(tree / "latest") == "bin/tool"
    assert os.readlink(tree / "passwd") == "/etc/passwd"
    assert (tree / "empty").is_dir()


def test_a_working_directory_over_the_workspace_limits_refuses_the_trial(
        tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "cache" / "environments")
    digest = _image(store, {f"data/{i:03}.csv": "x\n" for i in range(30)})
    root = _bundle(tmp_path / "b", digest)
    y = root / "task.yaml"
    y.write_text(y.read_text().replace("pids: 64}", "pids: 64, workspace_files: 20}"))
    bundle = load_bundle(root)
    tree = tmp_path / "tree"
    bundle.export_starting_tree(tree)
    with pytest.raises(TrialRefused, match=r"more than the workspace allows \(20 entries"):
        seed_from_image(bundle, tree, store)


def test_a_task_on_the_hosts_system_or_an_image_without_the_folder_adds_nothing(
        tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "cache" / "environments")
    plain = load_bundle(make_bundle(tmp_path / "plain"))
    tree = tmp_path / "t1"
    plain.export_starting_tree(tree)
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    assert seed_from_image(plain, tree, store).paths == []
    with store.staging() as rootfs:
        (rootfs / "etc").mkdir()
        image = store.publish(rootfs, source_kind="debian-recipe",
                              source_digest="sha256:" + "2" * 64,
                              config=ImageConfig(workdir="/srv/app"))
    bundle, tree2 = _task_tree(tmp_path, image.digest, "t2")
    assert seed_from_image(bundle, tree2, store).paths == []
    assert sorted(p.relative_to(tree2) for p in tree2.rglob("*")) == before
