"""A real image registry on loopback for the tests: Debian's ``docker-registry`` (the CNCF
distribution server Docker Hub and most private registries speak), plain HTTP, its storage in
a folder of the test, and ``skopeo`` to push OCI layouts the tests make into it.

skopeo is told the registry is insecure (plain HTTP) the way a user would tell it: a
``registries.conf`` naming ``127.0.0.1:PORT`` with ``insecure = true``, passed as
``--registries-conf`` here and through ``CONTAINERS_REGISTRIES_CONF`` to assay (set for the
test's process and every ``python -m assay`` it starts; Debian's skopeo 1.9 reads only the
flag, which assay passes from that variable). Nothing here is mocked; a machine without the
two packages skips with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.environments.oci import machine_platform

ARCH = machine_platform().split("/")[1]

#: Seconds the server gets to answer ``GET /v2/``.
READY_SECONDS = 20


def require_tools() -> None:
    """Skip (with the package to install) where the registry or skopeo is missing."""
    for tool, package in (("docker-registry", "docker-registry"), ("skopeo", "skopeo")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package}; `make setup`)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """One running ``docker-registry serve``; :meth:`stop` ends it (by its own pid).

    ``login`` (user, password): HTTPS with a certificate made here for ``127.0.0.1`` and
    basic auth from an htpasswd file (bcrypt, as the registry requires). skopeo then trusts the
    certificate through ``SSL_CERT_FILE`` (Go reads it) and logs in from the auth file
    :attr:`auth_file` names (``REGISTRY_AUTH_FILE``), as a user's would."""

    def __init__(self, root: Path, *, login: tuple[str, str] | None = None) -> None:
        self.root = root
        self.storage = root / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.login = login
        self.ca: Path | None = None
        self.auth_file: Path | None = None
        http = f"addr: '{self.host}'"
        auth = ""
        if login is not None:
            self.ca, key = root / "cert.pem", root / "key.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                            "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", str(key), "-out", str(self.ca)],
                           check=True, capture_output=True, timeout=60)
            http += f", tls: {{certificate: {self.ca}, key: {key}}}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt
                hashed = crypt.crypt(login[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=32))
            (root / "htpasswd").write_text(f"{login[0]}:{hashed}\n")
            auth = f"auth: {{htpasswd: {{realm: test, path: {root / 'htpasswd'}}}}}\n"
            self.auth_file = root / "auth.json"
            token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
            self.auth_file.write_text(json.dumps({"auths": {self.host: {"auth": token}}}))
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: error, accesslog: {disabled: true}}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.storage}}}}}\n"
            f"http: {{{http}}}\n" + auth)
        self.conf = root / "registries.conf"
        self.conf.write_text(f'[[registry]]\nlocation = "{self.host}"\n'
                             + ("insecure = true\n" if login is None else ""))
        self.log = open(root / "registry.log", "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(["docker-registry", "serve", str(config)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_SECONDS
        scheme = "http" if login is None else "https"
        context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        while True:
            try:
                with urllib.request.urlopen(f"{scheme}://{self.host}/v2/", timeout=2,
                                            context=context):
                    break
            except urllib.error.HTTPError as exc:  # 401: up, and asking for the login
                if exc.code == 401:
                    break
                raise
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("docker-registry did not start: "
                                       + (root / "registry.log").read_text()[-2000:]) from None
                time.sleep(0.05)

    def env(self) -> dict[str, str]:
        """The environment skopeo (and ``python -m assay``) needs to reach this registry."""
        extra = ({} if self.login is None else
                 {"SSL_CERT_FILE": str(self.ca), "REGISTRY_AUTH_FILE": str(self.auth_file)})
        return {**os.environ, "CONTAINERS_REGISTRIES_CONF": str(self.conf), **extra}

    def push(self, layout: Path, name: str, *, ref: str = "", all_images: bool = False,
             gzip: bool = False) -> str:
        """Push an OCI layout (its one image, or ``ref``) as ``name`` (``repo:tag``); returns
        the manifest digest the registry names it by. Its blobs go as they are, or with
        ``gzip`` its layers compressed by skopeo on the way (as registries serve images)."""
        digest_file = self.root / "pushed.digest"
        src = f"oci:{layout}" + (f":{ref}" if ref else "")
        keep = ["--dest-compress", "--dest-compress-format=gzip"] if gzip else \
            ["--preserve-digests"]
        done = subprocess.run(["skopeo", f"--registries-conf={self.conf}", "copy", "--quiet",
                               *keep, *(["--all"] if all_images else []),
                               f"--digestfile={digest_file}", src,
                               f"docker://{self.host}/{name}"],
                       check=False, env=self.env(), capture_output=True, timeout=120,
                       text=True)
        if done.returncode != 0:
            raise RuntimeError(f"skopeo push failed: {done.stderr[-2000:]}")
        return digest_file.read_text().strip()

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps a blob on disk (to tamper with it)."""
        hexd = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


#: What a "slim" image leaves out of the root (as Docker's slim images do): a third of the
#: Debian root, and of what every push, pull and unpack of it costs a test.
SLIMMED = ("usr/share/locale", "usr/share/doc", "usr/share/man", "usr/share/info",
           "usr/share/perl", "usr/lib/x86_64-linux-gnu/perl", "usr/lib/x86_64-linux-gnu/perl5",
           "usr/lib/x86_64-linux-gnu/perl-base", "var/lib/apt/lists", "var/cache")


def layout_of_root(root: Path, out: Path, *, workdir: str = "/work",
                   files: dict[str, str] | None = None,
                   slimmed: tuple[str, ...] = SLIMMED,
                   keep: Callable[[str, tarfile.TarInfo], bool] | None = None) -> Path:
    """An OCI layout of an uncompressed layer holding the folder ``root`` (an image the tests
    already built) less ``slimmed``, and a second with ``files`` (absolute path: text) when
    given: what
    ``docker save`` or a build would push, without compressing 200 MB (skopeo pushes it as it
    is with ``--preserve-digests``). Of ``root``, what ``keep(relative name, header)`` keeps
    (a folder left out goes with all it holds); by default all but ``slimmed``."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (out / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    layers: list[dict[str, object]] = []

    def add_layer(fill: Callable[[tarfile.TarFile], None]) -> None:
        staged = out / "layer.tar"
        with tarfile.open(staged, "w") as tar:
            fill(tar)
        digest = hashlib.sha256()
        with open(staged, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        layer = "sha256:" + digest.hexdigest()
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer,
                       "size": staged.stat().st_size})
        os.rename(staged, blobs / layer[7:])

    def slim(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = "" if info.name == "." else info.name.removeprefix("./")
        if keep is not None:
            return info if keep(name, info) else None
        return None if any(name == p or name.startswith(p + "/") for p in slimmed) else info

    add_layer(lambda tar: tar.add(root, arcname=".", filter=slim))
    if files:
        def extra(tar: tarfile.TarFile) -> None:
            for path, text in sorted(files.items()):
                data = text.encode()
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        add_layer(extra)

    def blob(data: bytes) -> dict[str, object]:
        (blobs / sha(data)[7:]).write_bytes(data)
        return {"digest": sha(data), "size": len(data)}

    config = blob(json.dumps({
        "architecture": ARCH, "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [x["digest"] for x in layers]}}).encode())
    manifest = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": layers}).encode())
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest}]}))
    return out
