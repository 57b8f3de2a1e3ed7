"""Pulling pinned images from a registry (issue 33): ``assay env pull`` and
:func:`assay.environments.registry.pull_image` against a real registry on loopback.

The registry is Debian's ``docker-registry`` (the CNCF distribution server), started by the
test on a free port, plain HTTP, storage in the test's folder; the images are small OCI layouts
made by the test (the same writer as ``test_env_oci.py``) and pushed with ``skopeo copy``. The
client under test is skopeo too (assay drives it), so nothing on the pull path is mocked. What a
hostile or careless registry does is done to the real one: a blob's bytes changed in its
storage, a tag moved to another image after pinning, a layer that climbs out of the root, a
pull killed with SIGKILL half way.

A machine without ``docker-registry`` or ``skopeo`` skips (``make setup`` installs both).

Cost here (``ASSAY_TEST_CPU_LOG``, 2 shared cores): about 15 CPU-seconds and 50 s of wall for
the file, of which the image-pinned tasks (the example's Debian root, slimmed, pushed once and
pulled into an empty store; its oracle and nop, a Dockerfile ``FROM`` that pinned image built
on it and its oracle, then a Harbor task's import and task check in the same image, and a
Harbor task whose Dockerfile says ``FROM`` it, carried over and checked on that base: the same
build, found in the store) take 12 CPU-seconds (the Dockerfile on its base 3.4 of them, the
Harbor Dockerfile's check 1.2); the rest are one-file images at 0.1-0.4 each (the fallback for
a skopeo that writes blobs in another order 0.3, the blob follower's own test with a writer
thread standing in for skopeo 0.01) and the killed pull at 2. The 200 MB image is the shared
test image's root
(``tests/support/images.py``), built once for every file that needs it.

Full form (``ASSAY_ENV_BUILD_FULL=1``, which ``make test-full`` sets): a Dockerfile on the
pulled Debian root whose ``RUN apt-get install -y jq`` reaches Debian's archive, named by the
base's own apt sources, through the build's proxy (8 CPU-seconds, 21 s of wall here); and a
task written from Harbor's template (its test.sh installs curl and uv and runs ``uvx -w
pytest==… pytest``) whose Dockerfile says ``FROM`` that root without pip: imported, the
Dockerfile's appended lines install python3-pip and curl from the base's archive and pytest
with its CTRF plugin from PyPI on the base itself, and task check passes (23 CPU-seconds, 71 s
of wall under load). Run them alone with ``ASSAY_ENV_BUILD_FULL=1 .venv/bin/python -m pytest -q
tests/test_env_registry.py -k "installs_from_the_bases or harbor_template"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_harbor_import as harbor
from conftest import run_cli
from support.images import base_image
from support.registry import Registry, layout_of_root, require_tools
from test_env_oci import ARCH, Layout, d, f, make_oci

from assay.agents import parse_agent
from assay.api import import_harbor
from assay.environments import pull_stream
from assay.environments import registry as registry_module
from assay.environments.on_base import package_archives
from assay.environments.registry import is_reference, parse_reference, pull_image
from assay.environments.store import ImageStore
from assay.errors import ImageRefused, InputError, PullFailed
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "agent-tasks" / "leaderboard-rank-007"
#: The full form (``make test-full``): a Dockerfile step's apt install on a pulled base.
FULL = os.environ.get("ASSAY_ENV_BUILD_FULL") == "1"
#: The example's image (what ``test_env_run.py`` builds too): its tests need sortedcontainers.
PACKAGES = ("python3-sortedcontainers",)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    require_tools()
    reg = Registry(tmp_path / "registry")
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(reg.conf))
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "store")


def leftovers(store: ImageStore) -> list[str]:
    """What a failed pull left in the store: images, source entries, staging folders."""
    found: list[str] = []
    for folder in (store.images_dir, store.sources_dir):
        if folder.exists():
            found += [str(p) for p in folder.iterdir()]
    if store.staging_dir.exists():
        store.sweep()
        found += [str(p) for p in store.staging_dir.iterdir()]
    return found


def _hello(root: Path, text: str = "hello") -> Path:
    layout = root / f"layout-{text}"
    make_oci(layout, [[d("etc"), f("etc/greeting", text), d("bin")]],
             Env=["PATH=/bin", "GREETING=" + text], WorkingDir="/srv")
    return layout


def test_references_are_parsed_and_told_from_bare_digests() -> None:
    pin = "sha256:" + "ab" * 32
    ref = parse_reference(f"127.0.0.1:5000/team/py:3.13@{pin}")
    assert (ref.name, ref.tag, ref.digest) == ("127.0.0.1:5000/team/py", "3.13", pin)
    assert parse_reference("ghcr.io/x/y").tag == "latest"
    assert is_reference(f"ghcr.io/x/y@{pin}") and is_reference("localhost:5000/y:1")
    assert not is_reference(pin) and not is_reference("python:3.13")
    with pytest.raises(InputError, match="digest after '@'"):
        parse_reference("ghcr.io/x/y@sha256:abc")
    with pytest.raises(InputError, match="not a registry/repository name"):
        parse_reference("ghcr.io/X Y/z:1")


def test_pull_by_digest_records_both_digests_and_is_then_a_lookup(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    pushed = registry.push(_hello(tmp_path), "team/hello:v1")
    ref = f"{registry.host}/team/hello@{pushed}"
    lines: list[str] = []
    got = pull_image(ref, store, progress=lines.append)
    assert not got.cached and got.pinned_digest == got.manifest_digest == pushed
    image = got.image
    assert image.source_kind == "registry" and image.source_digest == pushed
    assert image.manifest_digest == pushed and image.reference == ref
    assert image.digest != pushed  # assay's own digest: the root filesystem's
    root = store.rootfs(image.digest)
    assert (root / "etc/greeting").read_text() == "hello"
    assert image.config.workdir == "/srv" and image.config.env["GREETING"] == "hello"
    assert any("skopeo" in line for line in lines), lines
    # each layer unpacked while skopeo wrote it, not after (pull_stream)
    assert any(line.endswith("unpacked as they arrive") for line in lines), lines
    assert not any("another order" in line for line in lines), lines
    registry.stop()  # a second pull of the same pin needs no registry
    again = pull_image(ref, store)
    assert again.cached and again.image.digest == image.digest
    assert not list(store.staging_dir.glob("build-*"))


def test_when_skopeo_writes_in_another_order_the_finished_copy_is_imported(
        tmp_path: Path, registry: Registry, store: ImageStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """skopeo 1.9 always writes the layers in order, so the fallback is reached by having the
    follower give up at once (the one stand-in here); the real copy then finishes and is
    imported the old way, with the same image as a followed pull."""
    pushed = registry.push(_hello(tmp_path), "team/hello:v1")
    ref = f"{registry.host}/team/hello@{pushed}"
    followed = pull_image(ref, ImageStore(tmp_path / "followed"))

    def gives_up(*_args: object, **_kw: object) -> None:
        raise pull_stream.OutOfOrder("a test's stand-in")
    monkeypatch.setattr(registry_module, "import_while_copying", gives_up)
    lines: list[str] = []
    got = pull_image(ref, store, progress=lines.append)
    assert any("another order (a test's stand-in)" in line for line in lines), lines
    assert got.image.digest == followed.image.digest and got.manifest_digest == pushed
    assert (store.rootfs(got.image.digest) / "etc/greeting").read_text() == "hello"


class _Copy:
    """What GrowingBlob asks of the running copy, for a writer thread that stands in for
    skopeo (writing pieces to a temporary name, then renaming it to the blob's digest, as
    containers/image's dir destination does): running until the writer is done."""

    def __init__(self, writer: threading.Thread, failure: Exception | None = None) -> None:
        self.writer, self.failure = writer, failure

    def running(self) -> bool:
        return self.writer.is_alive()

    def wait(self) -> None:
        self.writer.join()
        if self.failure is not None:
            raise self.failure

    def tick(self) -> None:
        pass


def _writer(folder: Path, pieces: list[bytes], final: str | None) -> threading.Thread:
    def write() -> None:
        temp = folder / f"{pull_stream.TEMP_PREFIX}123"
        with open(temp, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
                fh.flush()
                time.sleep(0.01)
        if final is not None:
            os.rename(temp, folder / final)
        else:
            temp.unlink()  # as skopeo does with a blob that failed its digest
    return threading.Thread(target=write)


def test_a_blob_is_followed_while_written_and_ends_only_where_it_is_named(
        tmp_path: Path) -> None:
    data = [os.urandom(5000) for _ in range(8)]
    hexd = hashlib.sha256(b"".join(data)).hexdigest()
    writer = _writer(tmp_path, data, hexd)
    writer.start()
    with pull_stream.GrowingBlob(tmp_path, hexd, set(), _Copy(writer)) as blob:
        got = b""
        while piece := blob.read(3000):
            got += piece
    assert got == b"".join(data)

    other = tmp_path / "other"
    other.mkdir()
    writer = _writer(other, data, "f" * 64)  # renamed to another blob's digest
    writer.start()
    with pytest.raises(pull_stream.OutOfOrder, match="not " + hexd[:12]):
        with pull_stream.GrowingBlob(other, hexd, set(), _Copy(writer)) as blob:
            while blob.read(3000):
                pass

    failed = tmp_path / "failed"
    failed.mkdir()
    writer = _writer(failed, data, None)  # the copy fails: its own reason is raised
    writer.start()
    with pytest.raises(ImageRefused, match="does not match its digest"):
        with pull_stream.GrowingBlob(failed, hexd, set(), _Copy(
                writer, ImageRefused("x: the registry served content that does not match "
                                     "its digest"))) as blob:
            while blob.read(3000):
                pass


def test_a_tag_resolves_once_and_a_moved_tag_is_never_followed_past_a_pin(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    first = registry.push(_hello(tmp_path, "one"), "team/app:stable")
    got = pull_image(f"{registry.host}/team/app:stable", store)
    assert got.resolved_tag == "stable" and got.pinned_digest == first
    second = registry.push(_hello(tmp_path, "two"), "team/app:stable")  # the tag moves
    assert second != first
    # pinned as task corpora pin (tag and digest): the digest decides, as with Docker
    other = ImageStore(tmp_path / "other")
    old = pull_image(f"{registry.host}/team/app:stable@{first}", other)
    assert old.pinned_digest == first and old.resolved_tag is None
    assert (other.rootfs(old.image.digest) / "etc/greeting").read_text() == "one"
    # the tag alone now names the other image, under its own digest
    new = pull_image(f"{registry.host}/team/app:stable", other)
    assert new.pinned_digest == second and new.image.digest != old.image.digest
    assert (other.rootfs(new.image.digest) / "etc/greeting").read_text() == "two"


def test_a_tampered_blob_is_refused_and_nothing_is_left(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    layout = _hello(tmp_path)
    pushed = registry.push(layout, "team/hello:v1")
    manifest = json.loads((layout / "blobs/sha256" / pushed[7:]).read_text())
    blob = registry.blob_path(manifest["layers"][0]["digest"])
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: the registry serves it as it is
    blob.write_bytes(bytes(data))
    with pytest.raises(ImageRefused, match="does not match"):
        pull_image(f"{registry.host}/team/hello@{pushed}", store)
    assert leftovers(store) == []


def test_a_manifest_not_matching_the_pin_is_refused(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    layout = _hello(tmp_path)
    pushed = registry.push(layout, "team/hello:v1")
    # the registry's copy of the manifest rewritten in place: served under the pinned name
    stored = registry.blob_path(pushed)
    doc = json.loads(stored.read_text())
    doc["annotations"] = {"changed": "yes"}
    stored.write_text(json.dumps(doc))
    with pytest.raises((ImageRefused, PullFailed)) as caught:
        pull_image(f"{registry.host}/team/hello@{pushed}", store)
    assert pushed in str(caught.value) or "match" in str(caught.value)
    assert leftovers(store) == []


def test_a_layer_that_climbs_out_is_refused(tmp_path: Path, registry: Registry,
                                           store: ImageStore) -> None:
    layout = tmp_path / "evil"
    make_oci(layout, [[d("etc"), f("../../escaped", "x")]])
    pushed = registry.push(layout, "team/evil:v1")
    with pytest.raises(ImageRefused, match="escaped"):
        pull_image(f"{registry.host}/team/evil@{pushed}", store)
    assert leftovers(store) == []
    assert not (tmp_path / "escaped").exists() and not (store.root / "escaped").exists()


def test_this_machines_image_is_chosen_from_a_multi_platform_index(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    other = "arm64" if ARCH != "arm64" else "amd64"
    lay = Layout(tmp_path / "multi")
    mine, _ = lay.image([[d("etc"), f("etc/arch", ARCH)]], arch=ARCH)
    theirs, _ = lay.image([[d("etc"), f("etc/arch", other)]], arch=other)
    lay.index([{**mine, "platform": {"os": "linux", "architecture": ARCH}},
               {**theirs, "platform": {"os": "linux", "architecture": other}}])
    # the index itself as the image skopeo pushes (an OCI layout of one index)
    index_doc = json.loads((lay.root / "index.json").read_text())
    idesc = {"mediaType": index_doc["mediaType"], **lay.blob(json.dumps(index_doc).encode())}
    (lay.root / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "manifests": [
            {**idesc, "annotations": {"org.opencontainers.image.ref.name": "multi"}}]}))
    pushed = registry.push(lay.root, "team/multi:v1", ref="multi", all_images=True)
    assert pushed == idesc["digest"]
    lines: list[str] = []
    got = pull_image(f"{registry.host}/team/multi@{pushed}", store, progress=lines.append)
    assert got.pinned_digest == pushed and got.manifest_digest == mine["digest"]
    # this platform's manifest is read before the copy: its blobs (config, layer) are the
    # progress' total
    assert any(ln.startswith("fetching 2 blobs, ") and mine["digest"] in ln
               for ln in lines), lines
    assert (store.rootfs(got.image.digest) / "etc/arch").read_text() == ARCH


def test_a_registry_with_tls_and_a_login_is_pulled_from_with_the_users_auth_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS with a certificate made here and basic auth: assay's pull works with what skopeo
    reads, the user's auth file (``REGISTRY_AUTH_FILE``) and trusted roots; without the
    login it is refused with the registry's reason."""
    require_tools()
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the registry's certificate)")
    reg = Registry(tmp_path / "registry", login=("tester", "s3cret-pw"))
    try:
        pushed = reg.push(_hello(tmp_path), "team/private:v1")
        ref = f"{reg.host}/team/private@{pushed}"
        for key, value in reg.env().items():
            if key in ("CONTAINERS_REGISTRIES_CONF", "SSL_CERT_FILE", "REGISTRY_AUTH_FILE"):
                monkeypatch.setenv(key, value)
        nobody = tmp_path / "no-login.json"
        nobody.write_text('{"auths": {}}')
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(nobody))
        with pytest.raises(PullFailed, match="cannot pull .*(unauthorized|authentication)"):
            pull_image(ref, ImageStore(tmp_path / "refused"))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(reg.auth_file))
        got = pull_image(ref, ImageStore(tmp_path / "store"))
        assert got.manifest_digest == pushed and not got.cached
        assert "s3cret" not in got.image.model_dump_json()  # no secret in the record
    finally:
        reg.stop()


def test_an_unreachable_registry_or_unknown_image_cannot_be_pulled(
        tmp_path: Path, registry: Registry, store: ImageStore) -> None:
    missing = "sha256:" + "0" * 64
    with pytest.raises(PullFailed, match=rf"cannot pull {registry.host}/team/none@"):
        pull_image(f"{registry.host}/team/none@{missing}", store)
    registry.stop()
    with pytest.raises(PullFailed, match="cannot pull"):
        pull_image(f"{registry.host}/team/none:v1", store)
    assert leftovers(store) == []


def _assay(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "assay", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            start_new_session=True)


def test_env_pull_cli_and_a_pull_killed_half_way_leaves_nothing(
        tmp_path: Path, registry: Registry) -> None:
    layout = tmp_path / "big"
    # 12 MiB that do not compress: the copy takes long enough to be killed inside it
    make_oci(layout, [[d("data"), f("data/noise", os.urandom(12 << 20))]])
    pushed = registry.push(layout, "team/big:v1")
    ref = f"{registry.host}/team/big@{pushed}"
    env = {**registry.env(), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    store = ImageStore(tmp_path / "cache" / "environments")
    proc = _assay("env", "pull", ref, env=env)
    deadline = time.monotonic() + 60
    while not list(store.staging_dir.glob("build-*/dir")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the pull never started downloading"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # its own group: assay and the skopeo it started
    proc.communicate(timeout=30)
    assert not store.images_dir.exists() or not any(store.images_dir.iterdir())
    assert not list(store.sources_dir.glob("registry-*"))
    done = _assay("env", "pull", ref, env=env)
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    image = store.get(out.strip())
    assert image is not None and image.manifest_digest == pushed
    assert f"pulled: {ref} (manifest {pushed})" in " ".join(err.split())
    # the progress on stderr, each line with the time since the start in front: what it
    # fetches (the config and the layer: 12 MiB and a little), then the layer unpacked
    lines = err.splitlines()
    fetch = [ln for ln in lines if "fetching 2 blobs, 12.0 MiB of " in ln]
    assert len(fetch) == 1 and re.match(r"\s*\d+s fetching ", fetch[0]), lines
    assert any(re.match(r"\s*\d+s layer 1/1 ", ln) for ln in lines), lines
    assert not list(store.staging_dir.glob("build-*")), "the killed pull's folder was swept"


def _registry_pinned_copy(tmp: Path, ref: str, *, as_source: bool = False) -> Path:
    """The example bundle, its environment the registry image ``ref`` (no recipe): as its
    ``environment_image``, or (``as_source``) as ``environment.image`` with no pin."""
    dest = tmp / "bundle"
    shutil.copytree(EXAMPLE, dest, symlinks=True)
    path = dest / "task.yaml"
    if as_source:
        text = path.read_text().replace("image: environment/recipe.yaml", f"image: {ref}")
        text = re.sub(r"\n *environment_image: \S+", "", text)
    else:
        text = path.read_text().replace("image: environment/recipe.yaml, ", "")
        text = re.sub(r"environment_image: \S+", f"environment_image: {ref}", text)
    path.write_text(text)
    return dest


#: A Dockerfile's steps on the pushed base: the RUN fails unless the base's own file is there;
#: the COPY puts a file of the context into the working directory (a Harbor task's starting
#: tree). A Harbor task that says the same with its own WORKDIR is the same build, once moved.
ON_BASE_STEPS = ("RUN test -f /etc/leaderboard-base && echo built-on-its-base > /etc/on-base\n"
                 "WORKDIR /work\nCOPY greet.py /work/greet.py\n")


def _dockerfile_on(tmp: Path, ref: str, name: str = "on-base") -> Path:
    """The example bundle, its image a Dockerfile ``FROM ref`` (:data:`ON_BASE_STEPS`)."""
    dest = tmp / name
    shutil.copytree(EXAMPLE, dest, symlinks=True)
    (dest / "environment" / "Dockerfile").write_text(f"FROM {ref}\n{ON_BASE_STEPS}")
    (dest / "environment" / "greet.py").write_text(harbor.BUGGY)
    path = dest / "task.yaml"
    text = path.read_text().replace("image: environment/recipe.yaml",
                                    "image: environment/Dockerfile").replace(
                                        "id: leaderboard-rank-007", "id: leaderboard-rank-008")
    path.write_text(re.sub(r"\n *environment_image: \S+", "", text))
    return dest


def test_a_bases_package_archives_are_read_from_its_sources_as_data(tmp_path: Path) -> None:
    """What the build's proxy lets through besides the registries: the archives the base's
    apt (one-line and deb822 files) or apk names, never through a link to the building
    machine."""
    root = tmp_path / "root"
    apt = root / "etc" / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text(
        "# a comment\ndeb [arch=amd64 signed-by=/k.gpg] http://archive.ubuntu.com/ubuntu "
        "noble main\ndeb-src http://archive.ubuntu.com/ubuntu noble main\n")
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian https://mirror.example.org/d\n"
        "Suites: bookworm\n")
    (apt / "sources.list.d" / "ignored.txt").write_text("deb http://not-read.example/ x\n")
    outside = tmp_path / "host.list"
    outside.write_text("deb http://host-only.example/ x main\n")
    (apt / "sources.list.d" / "host.list").symlink_to(outside)
    assert package_archives(root) == ["http://archive.ubuntu.com/ubuntu",
                                  "http://deb.debian.org/debian", "https://mirror.example.org/d"]
    shutil.rmtree(apt)
    (root / "etc" / "apt").symlink_to(tmp_path)  # a linked folder is not read either
    assert package_archives(root) == []
    (root / "etc" / "apk").mkdir()  # an Alpine base: apk's repositories, tagged or not
    (root / "etc" / "apk" / "repositories").write_text(
        "https://dl-cdn.alpinelinux.org/alpine/v3.20/main\n# off\n"
        "@edge https://dl-cdn.alpinelinux.org/alpine/edge/testing\n")
    assert package_archives(root) == ["https://dl-cdn.alpinelinux.org/alpine/v3.20/main",
                                      "https://dl-cdn.alpinelinux.org/alpine/edge/testing"]


def test_task_lint_says_a_tag_is_unpinned_and_write_digest_pins_it(
        tmp_path: Path, registry: Registry) -> None:
    pushed = registry.push(_hello(tmp_path), "team/hello:v1")
    bundle = _registry_pinned_copy(tmp_path, f"{registry.host}/team/hello:v1", as_source=True)
    got = run_cli(["task", "lint", str(bundle)])
    assert got.code == 1
    assert f"unpinned image {registry.host}/team/hello:v1" in " ".join(got.stdout.split())
    got = run_cli(["task", "lint", "--write-digest", str(bundle)])
    assert got.code == 0, got.stdout + got.stderr
    text = (bundle / "task.yaml").read_text()
    assert f"environment_image: {registry.host}/team/hello@{pushed}\n" in text
    assert f"image: {registry.host}/team/hello:v1" in text  # the tag stays as the source
    assert run_cli(["task", "lint", str(bundle)]).code == 0
    state = load_bundle(bundle).spec.initial_state
    assert state.environment_image == f"{registry.host}/team/hello@{pushed}"


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_a_task_pinned_to_a_registry_image_runs_its_oracle_and_nop_in_it(
        tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    built_store, built = base_image(PACKAGES)
    # one image serves both tasks (a second would cost another 200 MB pull): the example's
    # Debian root, and /app/greet.py for the Harbor task (its WORKDIR)
    layout = layout_of_root(built_store.rootfs(built.digest), tmp_path / "layout",
                            workdir="/app", files={"/app/greet.py": harbor.BUGGY,
                                                   "/etc/leaderboard-base": "pushed\n"})
    pushed = registry.push(layout, "team/leaderboard:v1")
    ref = f"{registry.host}/team/leaderboard@{pushed}"
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))  # an empty store: a real pull
    bundle = load_bundle(_registry_pinned_copy(tmp_path, ref))
    assert bundle.spec.initial_state.environment.image == ref
    oracle = run_trial(bundle, parse_agent("oracle"), tmp_path / "oracle")
    assert oracle.status == "graded", oracle.error
    grade = json.loads((tmp_path / "oracle" / "grades" / "v1.json").read_text())
    assert grade["accepted"] is True, grade
    env = json.loads((tmp_path / "oracle" / "trial.json").read_text())["environment_image"]
    pulled = ImageStore(tmp_path / "cache" / "environments").lookup_source("registry", pushed)
    assert pulled is not None
    assert env["source_kind"] == "registry" and env["reference"] == ref
    assert env["manifest_digest"] == pushed and env["source_digest"] == pushed
    assert env["digest"] == pulled.digest and env["pinned"] is True
    nop = run_trial(bundle, parse_agent("nop"), tmp_path / "nop")
    assert nop.status == "graded", nop.error
    grade = json.loads((tmp_path / "nop" / "grades" / "v1.json").read_text())
    assert grade["accepted"] is False and grade["checks"]["behavior"] == "fail", grade

    # A Dockerfile FROM that pinned image builds on it (the base from the store, its RUN step
    # in the build sandbox) and the oracle passes in the result
    on_base = load_bundle(_dockerfile_on(tmp_path, ref))
    done = run_trial(on_base, parse_agent("oracle"), tmp_path / "on-base-oracle")
    assert done.status == "graded", done.error
    grade = json.loads((tmp_path / "on-base-oracle" / "grades" / "v1.json").read_text())
    assert grade["accepted"] is True, grade
    env = json.loads((tmp_path / "on-base-oracle" / "trial.json").read_text())
    env = env["environment_image"]
    assert env["source_kind"] == "dockerfile" and env["digest"] != pulled.digest, env
    built = ImageStore(tmp_path / "cache" / "environments").get(env["digest"])
    assert built is not None
    assert any(n.startswith(f"built on {ref} (manifest {pushed}") for n in built.notes), built
    assert not any("Debian" in s for s in built.substitutions), built.substitutions
    root = ImageStore(tmp_path / "cache" / "environments").rootfs(built.digest)
    assert (root / "etc/on-base").read_text() == "built-on-its-base\n"
    assert (root / "app/greet.py").is_file() and built.config.workdir == "/work"

    # A Harbor task with a prebuilt docker_image (no Dockerfile) runs in that image as it is
    toml = harbor.TOML.replace("[environment]\n", f'[environment]\ndocker_image = "{ref}"\n')
    task = harbor.harbor_task(tmp_path / "harbor", toml=toml, dockerfile=None)
    (task / "environment" / "greet.py").unlink()  # the image holds it
    got = run_cli(["task", "import-harbor", str(task), "--out", str(tmp_path / "imported")])
    assert got.code == 0, got.stdout + got.stderr
    bundle_dir = tmp_path / "imported" / "greet-task"
    report = json.loads((bundle_dir / "harbor-import.json").read_text())["environment"]
    assert report["image"] == ref and report["image_source"] == "pulled", report
    assert load_bundle(bundle_dir).spec.initial_state.environment_image == ref
    code, out, rows = harbor.task_check(tmp_path / "imported", tmp_path / "check")
    assert code == 0, out
    assert rows[0]["status"] == "ok", rows
    assert rows[0]["environment_image"]["manifest_digest"] == pushed, rows

    # A Harbor task whose Dockerfile says FROM that image is carried over and built on it: the
    # same steps on the same base as the Dockerfile above once its WORKDIR is moved, so the
    # same image, found in the store; its nop fails and its oracle passes there
    docker = f"FROM {ref}\n" + ON_BASE_STEPS.replace("/work", "/app")
    task = harbor.harbor_task(tmp_path / "harbor-df", dockerfile=docker)
    got = run_cli(["task", "import-harbor", str(task), "--out", str(tmp_path / "imported-df")])
    assert got.code == 0, got.stdout + got.stderr
    assert "on_base:" in got.stdout  # the table's image column (the record names the base)
    bundle_dir = tmp_path / "imported-df" / "greet-task"
    assert (bundle_dir / "environment" / "Dockerfile").read_text() == f"FROM {ref}\n" \
        + ON_BASE_STEPS
    report = json.loads((bundle_dir / "harbor-import.json").read_text())["environment"]
    assert (report["image"], report["image_source"], report["base_ref"],
            report["approximate_base"]) == ("environment/Dockerfile", "on_base", ref, False)
    code, out, rows = harbor.task_check(tmp_path / "imported-df", tmp_path / "check-df")
    assert code == 0, out
    assert (rows[0]["status"], rows[0]["nop"], rows[0]["oracle"]) == (
        "ok", "fails behavior", "1/1"), rows
    image = rows[0]["environment_image"]
    assert (image["digest"], image["source_kind"]) == (built.digest, "dockerfile"), image


@pytest.mark.skipif(not FULL, reason="a real apt install on a pulled base: runs with "
                    "ASSAY_ENV_BUILD_FULL=1 (make test-full sets it)")
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_a_dockerfile_step_installs_from_the_bases_own_archive_through_the_proxy(
        tmp_path: Path, registry: Registry) -> None:
    from assay.environments.build import build_environment

    built_store, built = base_image(PACKAGES)
    layout = layout_of_root(built_store.rootfs(built.digest), tmp_path / "layout")
    pushed = registry.push(layout, "team/debian:v1")
    ref = f"{registry.host}/team/debian@{pushed}"
    context = tmp_path / "ctx"
    context.mkdir()
    # the layout leaves /var/cache out (SLIMMED); Docker's slim images keep apt's folders
    (context / "Dockerfile").write_text(
        f"FROM {ref}\n"
        "RUN mkdir -p /var/cache/apt/archives/partial\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends jq "
        "&& jq --version > /etc/jq-version\n"
        "WORKDIR /work\n")
    store = ImageStore(tmp_path / "store")
    image = build_environment(context / "Dockerfile", store=store).image
    assert "jq" in image.packages and "jq" not in built.packages, image.packages
    assert (store.rootfs(image.digest) / "etc/jq-version").read_text().startswith("jq-")
    archives = [n for n in image.notes if n.startswith("the base's package archives allowed")]
    assert archives and "deb.debian.org" in archives[0], image.notes
    assert image.build_hosts and "deb.debian.org:80" in image.build_hosts, image.build_hosts
    assert not (store.rootfs(image.digest) / "etc/apt/apt.conf.d/99assay-build").exists()


@pytest.mark.skipif(not FULL, reason="apt and pip installs on a pulled base: runs with "
                    "ASSAY_ENV_BUILD_FULL=1 (make test-full sets it)")
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_a_harbor_template_task_gets_its_test_tools_on_its_pulled_base(
        tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_harbor_images import TEMPLATE_SH, TEST_OUTPUTS

    built_store, built = base_image(PACKAGES)
    # perl stays (package scripts need it: ca-certificates, a dependency of python3-pip)
    layout = layout_of_root(built_store.rootfs(built.digest), tmp_path / "layout",
                            slimmed=("usr/share/locale", "usr/share/doc", "usr/share/man",
                                     "var/lib/apt/lists", "var/cache"))
    ref = f"{registry.host}/team/debian@{registry.push(layout, 'team/debian:v1')}"
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    assert not (built_store.rootfs(built.digest) / "usr/lib/python3/dist-packages/pip").exists()
    task = harbor.harbor_task(
        tmp_path / "harbor", dockerfile=f"FROM {ref}\nRUN mkdir -p /var/cache/apt/archives/"
        "partial\nWORKDIR /app\nCOPY greet.py /app/greet.py\n",
        test_sh=TEMPLATE_SH.replace("  -w pandas==2.2.3 \\\n", ""),
        # pytest puts the test file's folder on sys.path, not the working directory
        files={"tests/test_outputs.py": "import sys\nsys.path.insert(0, '/app')\n"
               + TEST_OUTPUTS})
    [done] = import_harbor([task], tmp_path / "bundles")
    assert done.image_text == f"on_base: environment/Dockerfile FROM {ref}"
    code, out, [row] = harbor.task_check(tmp_path / "bundles", tmp_path / "check")
    assert code == 0, out
    assert (row["status"], row["nop"], row["oracle"]) == ("ok", "fails behavior", "1/1"), row
    image = ImageStore(tmp_path / "cache" / "environments").get(
        row["environment_image"]["digest"])
    assert image is not None and {"python3-pip", "curl"} <= set(image.packages)
    grade = json.loads((tmp_path / "check" / "greet-task" / "oracle" / "0" / "grades" /
                        "v1.json").read_text())
    assert "pytest-8.4.1" in grade["details"]["behavior"]["stdout_tail"]


def test_a_task_whose_image_cannot_be_pulled_is_unsupported_here_and_task_check_exits_4(
        tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    pushed = registry.push(_hello(tmp_path), "team/gone:v1")
    ref = f"{registry.host}/team/gone@{pushed}"
    registry.stop()  # the registry is unreachable from here on
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    shutil.move(str(_registry_pinned_copy(tmp_path, ref)), bundles / "gone")
    # a Dockerfile FROM it is unsupported the same way (no --approximate-base: no Debian
    # stands in for the base)
    shutil.move(str(_dockerfile_on(tmp_path, ref)), bundles / "on-gone")
    got = run_cli(["task", "check", str(bundles), "--reruns", "1", "--out",
                   str(tmp_path / "check")])
    assert got.code == 4, got.stdout + got.stderr
    rows = json.loads((tmp_path / "check" / "task-check.json").read_text())
    assert [r["status"] for r in rows] == ["unsupported", "unsupported"], rows
    for row in rows:
        assert f"unsupported here: cannot pull {ref} (" in row["unsupported"], rows
    # --approximate-base, and no Debian release stands for that base: still unsupported here,
    # the reason being the pull, then why the translation cannot stand in
    got = run_cli(["task", "check", str(bundles / "on-gone"), "--reruns", "1",
                   "--approximate-base", "--out", str(tmp_path / "check-approx")])
    assert got.code == 4, got.stdout + got.stderr
    [row] = json.loads((tmp_path / "check-approx" / "task-check.json").read_text())
    assert row["unsupported"].startswith(f"unsupported here: cannot pull {ref} ("), row
    assert "; the Debian translation cannot stand in for it (--approximate-base): " in \
        row["unsupported"] and "an image the subset cannot rebuild" in row["unsupported"], row
    assert not (tmp_path / "cache" / "environments" / "images").exists() or not any(
        (tmp_path / "cache" / "environments" / "images").iterdir())
