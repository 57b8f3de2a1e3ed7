"""Building Debian recipes into the image store, for real: mmdebstrap from Debian's archive,
pip from PyPI, the steps in a bubblewrap sandbox rooted in the image being built.

Two real builds run here: the shared base image (``tests/support/images.py``: bookworm with
python3 and python3-pytest, 40 s to 4 min on these 2-core machines depending on their load;
found in the store instead when an earlier session built it with the same builder: the shared
images are kept across sessions unless ``ASSAY_TEST_IMAGE_CACHE=session``, as in ``make
test-full``),
and one recipe using every kind of step (a Debian package this host lacks, a pip requirement,
a copy, a shell line, env, workdir, user), 1-5 min, built right after a first attempt at it was
killed with SIGKILL half way through mmdebstrap. Everything else (cache hits, bad recipes,
refused copies, ``env ls``/``env rm``) costs no build. The full form adds two builds that fail
(a step exiting non-zero after a copy through a link; a package missing from the suite), 2-3 min
each: ``ASSAY_ENV_BUILD_FULL=1`` (``make test-full`` sets it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from support.images import (
    BASE_RECIPE,
    build_shared,
    image_cache_dir,
    require_mmdebstrap,
    shared_base,
)

from assay.api.environments import build_environment, resolve_digest, source_type
from assay.environments.build_sandbox import run_in_root
from assay.environments.debian import build_recipe
from assay.environments.store import ImageStore
from assay.errors import InputError
from assay.suites.errors import SuiteError
from assay.suites.recipe import load_recipe, recipe_digest

SRC = Path(__file__).resolve().parents[1] / "src"
FULL = os.environ.get("ASSAY_ENV_BUILD_FULL") == "1"
full_only = pytest.mark.skipif(not FULL, reason="a failing real build: runs with "
                               "ASSAY_ENV_BUILD_FULL=1 (make test-full sets it)")
#: A small Debian package (one binary, ~100 KiB) that this host does not have.
HOST_LACKS = "tree"

FULL_RECIPE = """\
suite: bookworm
packages: [python3, tree]
python: "3.12"
pip: [six==1.17.0]
env: {GREETING: hello}
steps:
  - copy: {src: data/notes.txt, dest: /opt/data/}
  - copy: {src: scripts, dest: /opt/scripts, mode: "0755"}
  - workdir: /srv/app
  - run: |
      echo "$GREETING from $(pwd)" > made.txt
      python -c "import six; print(six.__version__)" >> made.txt
      /opt/scripts/hello.sh >> made.txt
  - env: {LATER: "yes"}
  - user: nobody
"""


def _in_image(rootfs: Path, command: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    """Run ``command`` in a built image (read-only, no network)."""
    run = run_in_root(rootfs, command, env=env, writable=False, network=False, timeout=120)
    return run.returncode, "\n".join(run.tail)


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory):
    return shared_base(tmp_path_factory)


def _write_full_recipe(folder: Path) -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "notes.txt").write_text("copied from the recipe's folder\n")
    # as a checkout made under umask 077 leaves it: a container's root reads it, and so must
    # the build's root (an unprivileged host uid when assay runs as root)
    (folder / "data" / "notes.txt").chmod(0o600)
    (folder / "scripts").mkdir(exist_ok=True)
    (folder / "scripts" / "hello.sh").write_text("#!/bin/sh\necho hello from a copied script\n")
    (folder / "scripts" / "hello.sh").chmod(0o644)  # the copy's mode makes it executable
    path = folder / "env.yaml"
    path.write_text(FULL_RECIPE)
    return path


# -- the shared base image -------------------------------------------------------------------

def test_base_image_has_python_pytest_and_no_setuid(base) -> None:
    store, result = base
    image = result.image
    rootfs = store.rootfs(image.digest)
    assert image.source_kind == "debian-recipe"
    assert {"python3", "python3-pytest", "python-is-python3"} <= set(image.packages)
    assert any("python-is-python3" in n for n in image.notes)
    assert image.config.workdir == "/work" and image.config.env["PATH"].endswith("/bin")
    code, text = _in_image(rootfs, ["python", "-m", "pytest", "--version"], image.config.env)
    assert code == 0, text
    assert "pytest" in text
    setid = [str(p) for p in rootfs.rglob("*") if not p.is_symlink()
             and p.lstat().st_mode & 0o6000]
    assert setid == []
    assert (rootfs / "usr/bin/passwd").is_file()  # it was setuid in Debian; now plain


def test_second_build_is_a_cache_hit_without_mmdebstrap(base, tmp_path_factory,
                                                        monkeypatch, tmp_path) -> None:
    store, first = base
    monkeypatch.setenv("PATH", str(tmp_path))  # no mmdebstrap, no bwrap: nothing can run
    lines: list[str] = []
    again = build_shared(image_cache_dir(tmp_path_factory), "base", BASE_RECIPE,
                         progress=lines.append)[1]
    assert again.cached is True
    assert again.image.digest == first.image.digest
    assert not any(line.startswith("mmdebstrap") for line in lines)
    assert any(line.startswith("cached:") for line in lines)


def test_a_build_another_process_holds_is_waited_for_not_repeated(tmp_path) -> None:
    """Two builders of one recipe into one store build it once. Here the test is the first
    builder: it holds the recipe's lock (``ImageStore.source_lock``), a real second process
    asks for the same recipe, says it waits, and once the test publishes the image and lets
    go it takes that image. Its PATH has no ``mmdebstrap``: had it built, it would have failed
    saying so."""
    store = ImageStore(tmp_path / "store")
    recipe_path = tmp_path / "env.yaml"
    recipe_path.write_text("suite: bookworm\npackages: [python3]\n")
    source = recipe_digest(*load_recipe(recipe_path))
    script = ("import sys\nfrom pathlib import Path\n"
              "from assay.environments.debian import build_recipe\n"
              "from assay.environments.store import ImageStore\n"
              "from assay.suites.recipe import load_recipe\n"
              f"p = Path({str(recipe_path)!r})\n"
              f"r = build_recipe(*load_recipe(p), ImageStore(Path({str(store.root)!r})),"
              " progress=lambda s: print(s, flush=True))\n"
              "print('result', r.cached, r.image.digest, flush=True)\n")
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    with store.source_lock("debian-recipe", source):
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("waiting: another process is building this source"), (
            first + proc.stderr.read())
        with store.staging() as rootfs:
            (rootfs / "etc").mkdir()
            (rootfs / "etc" / "built-by").write_text("the first builder\n")
            mine = store.publish(rootfs, source_kind="debian-recipe", source_digest=source)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == f"result True {mine.digest}"
    assert out.splitlines()[0].startswith("cached:")
    assert [i.digest for i in store.ls()] == [mine.digest]


# -- one recipe with every kind of step, after a killed first attempt ------------------------

def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if text.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_killed_build_leaves_no_image_then_full_recipe_builds(tmp_path) -> None:
    require_mmdebstrap()
    if subprocess.run(["dpkg", "-s", HOST_LACKS], capture_output=True).returncode == 0:
        pytest.skip(f"this host has {HOST_LACKS} installed; the test needs a package it lacks")
    recipe_path = _write_full_recipe(tmp_path / "recipe")
    store = ImageStore(tmp_path / "store")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from assay.environments.debian import build_recipe\n"
        "from assay.environments.store import ImageStore\n"
        "from assay.suites.recipe import load_recipe\n"
        f"recipe, context = load_recipe(Path({str(recipe_path)!r}))\n"
        f"build_recipe(recipe, context, ImageStore(Path({str(store.root)!r})),\n"
        "             progress=lambda l: print(l, flush=True))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "extracting archives" in line or "installing essential" in line:
            break
    assert any("extracting" in s or "installing essential" in s for s in seen), seen
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = [p for p in store.staging_dir.iterdir() if p.name.startswith("build-")]
    assert left, "the killed build had a staging folder"
    deadline = time.monotonic() + 60
    while _processes_naming(str(store.staging_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_naming(str(store.staging_dir)) == [], "the build's processes outlived it"
    assert store.ls() == []
    assert store.lookup_source("debian-recipe", recipe_digest(*load_recipe(recipe_path))) is None

    lines: list[str] = []
    recipe, context = load_recipe(recipe_path)
    result = build_recipe(recipe, context, store, origin=recipe_path, progress=lines.append)
    assert result.cached is False
    assert sorted(p.name for p in store.staging_dir.iterdir()) == []  # swept, then cleaned
    image = result.image
    rootfs = store.rootfs(image.digest)
    # progress: mmdebstrap's stages, pip, one line a step
    assert any(s.startswith("mmdebstrap: I: extracting") for s in lines)
    assert "pip: six==1.17.0" in lines
    assert sum(s.startswith("step ") for s in lines) == 6
    # the Debian package the host lacks is installed and runs
    assert HOST_LACKS in image.packages
    code, text = _in_image(rootfs, [HOST_LACKS, "--version"], image.config.env)
    assert code == 0 and "tree v" in text, text
    # the pip requirement, the copies, the shell line with its env and workdir
    code, text = _in_image(rootfs, ["python", "-c", "import six; print(six.__file__)"],
                           image.config.env)
    assert code == 0 and "/usr/local/lib/python3" in text, text
    assert (rootfs / "opt/data/notes.txt").read_text() == "copied from the recipe's folder\n"
    assert (rootfs / "opt/scripts/hello.sh").stat().st_mode & 0o777 == 0o755
    assert (rootfs / "srv/app/made.txt").read_text() == (
        "hello from /srv/app\n1.17.0\nhello from a copied script\n")
    # the config the image records
    assert image.config.workdir == "/srv/app"
    assert image.config.env["GREETING"] == "hello" and image.config.env["LATER"] == "yes"
    assert image.config.user == "nobody"
    assert any("3.12" in s and "3.11" in s for s in image.substitutions), image.substitutions
    # the steps' network was the registry proxy alone (pip reached PyPI through it)
    assert any(n.startswith("build steps had no network but assay's registry proxy")
               and "pypi.org" in n and "deb.debian.org" in n for n in image.notes), image.notes
    assert image.build_hosts is not None
    assert {"pypi.org:443", "files.pythonhosted.org:443", "deb.debian.org:80"} <= set(
        image.build_hosts)
    assert not any(h.startswith(("github.com", "example.com")) for h in image.build_hosts)
    assert any("user: nobody" in n for n in image.notes)
    if os.geteuid() == 0:  # the steps ran as an unprivileged host uid, and the record says so
        assert any("never the host's root" in n for n in image.notes), image.notes
    assert not (rootfs / ".assay-context").exists()
    assert not (rootfs / ".assay-host-ca.crt").exists()
    assert not (rootfs / "etc/apt/apt.conf.d/99assay-build").exists()
    # and the record on disk is the one returned
    assert store.get(image.digest) == image
    assert store.lookup_source("debian-recipe", image.source_digest) == image


# -- recipes refused before anything runs ----------------------------------------------------

@pytest.mark.parametrize(("text", "line", "field", "words"), [
    ("suite: bookworm\npackages: [python3]\npyhton: '3.12'\n", 3, "pyhton", "did you mean"),
    ("packages:\n  - python3\n  - 'Bad Name; rm -rf /'\n", 3, "packages.1",
     "not a Debian package name"),
    ("steps:\n  - apt: [jq, 'git curl']\n", 2, "steps.0.apt.1", "one package per entry"),
    ("python: 3.10\n", 1, "python", "write the version quoted"),
    ("python: '3'\n", 1, "python", "written '3.X'"),
    ("steps:\n  - run: echo ok\n  - rnu: echo typo\n", 3, "steps.1", "one of the keys"),
    ("steps:\n  - copy: {src: a.txt}\n", 2, "steps.0.copy.dest", "required"),
    ("steps:\n  - run: echo\n    extra: 1\n", 3, "steps.0.extra", "unknown key"),
    ("mirror: file:///etc\n", 1, "mirror", "http:// or https://"),
    ("workdir: relative/dir\n", 1, "workdir", "absolute"),
    ("suite: bookworm\nsuite: trixie\n", 2, "suite", "duplicate key"),
])
def test_bad_recipe_names_file_line_and_field(tmp_path, text, line, field, words) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert f"{path}:{line}: field '{field}'" in message, message
    assert words in message, message


def test_recipe_file_bounds_and_shape(tmp_path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("packages: [" + ", ".join(["python3"] * 60_000) + "]\n")
    with pytest.raises(SuiteError, match="over the 256 KiB limit"):
        load_recipe(big)
    listing = tmp_path / "list.yaml"
    listing.write_text("- python3\n")
    with pytest.raises(SuiteError, match="expected a mapping"):
        load_recipe(listing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("packages: [python3\nsteps: []\n")
    with pytest.raises(SuiteError, match=r"broken.yaml:\d+: invalid YAML"):
        load_recipe(broken)


def test_copy_out_of_the_recipe_folder_is_refused(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "recipe"
    folder.mkdir()
    (tmp_path / "secret.txt").write_text("not for the image")
    (folder / "inside.txt").write_text("fine")
    (folder / "leak").symlink_to(tmp_path / "secret.txt")
    (folder / "tree").mkdir()
    (folder / "tree" / "key").symlink_to("/etc/shadow")
    path = folder / "env.yaml"
    path.write_text("steps:\n"
                    "  - copy: {src: ../secret.txt, dest: /x}\n"
                    "  - copy: {src: /etc/passwd, dest: /x}\n"
                    "  - copy: {src: leak, dest: /x}\n"
                    "  - copy: {src: tree, dest: /x}\n"
                    "  - copy: {src: inside.txt, dest: /x}\n")
    with pytest.raises(SuiteError) as caught:
        load_recipe(path)
    problems = caught.value.problems
    assert [(p.line, p.field) for p in problems] == [
        (2, "steps.0.copy.src"), (3, "steps.1.copy.src"), (4, "steps.2.copy.src"),
        (5, "steps.3.copy.src")]
    assert "outside" in problems[0].message and "absolute" in problems[1].message
    assert "symbolic link" in problems[2].message and "symbolic link" in problems[3].message
    # through the API too, before any build: no mmdebstrap on PATH, nothing in the store
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    store = ImageStore(tmp_path / "store")
    with pytest.raises(InputError, match="leads outside"):
        build_environment(path, store=store)
    assert store.ls() == []


def test_source_type_reads_the_path(tmp_path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:3.12-slim\n")
    (tmp_path / "build.txt").write_text("# a Dockerfile by another name\n\nARG X=1\nFROM x\n")
    (tmp_path / "env.yaml").write_text("packages: [python3]\n")
    (tmp_path / "plain").write_text("packages: [python3]\n")
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    import tarfile
    with tarfile.open(tmp_path / "image.tar", "w") as tar:
        tar.add(tmp_path / "plain", arcname="manifest.json")
    assert source_type(tmp_path / "Dockerfile")[0] == "dockerfile"
    assert source_type(tmp_path / "build.txt")[0] == "dockerfile"
    assert source_type(tmp_path / "env.yaml")[0] == "recipe"
    assert source_type(tmp_path / "plain")[0] == "recipe"
    assert source_type(layout)[0] == "archive"
    assert source_type(tmp_path / "image.tar")[0] == "archive"
    assert source_type(tmp_path) == ("recipe", tmp_path / "env.yaml")
    with pytest.raises(InputError, match="does not exist"):
        source_type(tmp_path / "missing.yaml")


# -- env build / ls / rm through the CLI -----------------------------------------------------

def _tiny_image(store: ImageStore, text: str):
    """A real (tiny) root filesystem published to the store: enough for ls and rm."""
    with store.staging() as rootfs:
        (rootfs / "etc").mkdir()
        (rootfs / "etc" / "marker").write_text(text)
        return store.publish(rootfs, source_kind="debian-recipe",
                             source_digest="sha256:" + "0" * 63 + str(len(text) % 10),
                             source_label=f"tiny/{text}")


def test_env_build_ls_rm_cli(base, tmp_path_factory) -> None:
    store, built = base
    root = image_cache_dir(tmp_path_factory)
    env = {"ASSAY_CACHE_DIR": str(root), "COLUMNS": "200"}
    recipe = root / "recipes" / "base" / "env.yaml"
    result = run_cli(["env", "build", str(recipe)], env=env)
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == built.image.digest
    assert "cached" in result.stderr

    tiny = _tiny_image(store, f"cli-{os.getpid()}-{time.time_ns()}")
    listed = run_cli(["env", "ls", "--json"], env=env)
    assert listed.code == 0, listed.stderr
    digests = {i["digest"] for i in json.loads(listed.stdout)}
    assert {built.image.digest, tiny.digest} <= digests
    table = run_cli(["env", "ls"], env=env)
    assert tiny.digest[:19] in table.stdout
    assert "…" not in table.stdout  # a long label folds, never cut short

    prefix = tiny.digest.removeprefix("sha256:")[:16]
    assert resolve_digest(prefix, store=store) == tiny
    missing = run_cli(["env", "rm", "ffff" + "0" * 30], env=env)
    assert missing.code == 2 and "no image" in missing.stderr
    bad = run_cli(["env", "rm", "not-a-digest"], env=env)
    assert bad.code == 2 and "not a digest" in bad.stderr
    removed = run_cli(["env", "rm", prefix, "--json"], env=env)
    assert removed.code == 0, removed.stderr
    assert json.loads(removed.stdout)["digest"] == tiny.digest
    assert store.get(tiny.digest) is None
    assert store.get(built.image.digest) is not None
    again = run_cli(["env", "ls", "--json"], env=env)
    assert tiny.digest not in {i["digest"] for i in json.loads(again.stdout)}


def test_env_build_cli_bad_recipe_is_exit_2(tmp_path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("packages: [python3]\nstep:\n  - run: true\n")
    result = run_cli(["env", "build", str(path)],
                     env={"ASSAY_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"})
    assert result.code == 2
    said = "".join(result.stderr.split("\n"))  # the console wraps long lines
    assert f"{path}:2: field 'step'" in said and "did you mean 'steps'" in said, said


# -- builds that fail: the recipe's fault, named where it is written -------------------------
# Two more real builds (3 and 2 min here under load): the full form, run by `make test-full`
# and by `ASSAY_ENV_BUILD_FULL=1 .venv/bin/python -m pytest -q
# tests/test_env_build.py`; the default run checks the same errors' placement without a build
# (bad recipes, refused copies above).

@full_only
def test_failing_step_names_its_line_and_copies_stay_in_the_image(tmp_path) -> None:
    """A copy into a link a step made resolves inside the image (never to the host's path of
    the same name); a step that exits non-zero fails the build at its line, with its output,
    and leaves nothing in the store. One minimal build (no packages): 1-2 min here."""
    require_mmdebstrap()
    outside = tmp_path / "host-side"
    folder = tmp_path / "recipe"
    folder.mkdir()
    (folder / "a.txt").write_text("payload\n")
    path = folder / "env.yaml"
    path.write_text("steps:\n"
                    f"  - run: mkdir -p /opt {outside} && ln -s {outside} /opt/link\n"
                    "  - copy: {src: a.txt, dest: /opt/link/}\n"
                    "  - run: |\n"
                    f"      cat {outside}/a.txt\n"
                    "      echo 'boom: the tests failed' >&2\n"
                    "      exit 3\n")
    store = ImageStore(tmp_path / "store")
    with pytest.raises(InputError) as caught:
        build_environment(path, store=store)
    message = str(caught.value)
    assert f"{path}:4: field 'steps.2'" in message, message
    assert "exited 3" in message and "boom: the tests failed" in message
    assert "payload" in message  # the copy landed inside the image, at the link's target
    assert not outside.exists()  # and not on the host
    assert store.ls() == []
    assert [p.name for p in store.staging_dir.iterdir()] == []


@full_only
def test_package_missing_from_the_suite_is_the_recipes_fault(tmp_path) -> None:
    require_mmdebstrap()
    path = tmp_path / "env.yaml"
    path.write_text("packages: [python3, no-such-package-for-assay]\n")
    store = ImageStore(tmp_path / "store")
    with pytest.raises(SuiteError) as caught:
        build_environment(path, store=store)
    message = str(caught.value)
    assert f"{path}: field 'packages'" in message and "no-such-package-for-assay" in message
    assert store.ls() == []
    assert [p.name for p in store.staging_dir.iterdir()] == []


def test_env_build_cli_refuses_build_args_for_a_recipe(tmp_path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("packages: [python3]\n")
    env = {"ASSAY_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"}
    result = run_cli(["env", "build", str(path), "--build-arg", "PY=3.12"], env=env)
    assert result.code == 2 and "--build-arg is for Dockerfiles" in result.stderr
    malformed = run_cli(["env", "build", str(path), "--build-arg", "novalue"], env=env)
    assert malformed.code == 2 and "expected NAME=VALUE" in malformed.stderr


def test_builder_confines_copies_of_a_translated_recipe(tmp_path, monkeypatch) -> None:
    """A recipe made by a translator (a Dockerfile's COPY), not read by the recipe loader, is
    checked by the builder itself before anything runs."""
    from assay.suites.recipe import CopySpec, CopyStep, Recipe

    context = tmp_path / "context"
    context.mkdir()
    (tmp_path / "secret").write_text("host file")
    (context / "link").symlink_to(tmp_path / "secret")
    recipe = Recipe(steps=[CopyStep(copy=CopySpec(src="../secret", dest="/x")),
                           CopyStep(copy=CopySpec(src="link", dest="/x"))])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # nothing could run anyway
    store = ImageStore(tmp_path / "store")
    with pytest.raises(SuiteError) as caught:
        build_recipe(recipe, context, store, source_kind="dockerfile")
    assert [p.field for p in caught.value.problems] == ["steps.0.copy.src", "steps.1.copy.src"]
    assert store.ls() == []
