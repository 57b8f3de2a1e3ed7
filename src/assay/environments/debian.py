"""Building a Debian recipe into the image store.

The order is the recipe's: ``mmdebstrap`` makes the base (``--variant=apt``: Debian's essential
set plus apt, and the recipe's ``packages``) straight into a staging folder of the store; then,
inside that root filesystem and nowhere else (:mod:`assay.environments.build_sandbox`), pip
installs the recipe's ``pip`` requirements and the ``steps`` run in order; last, the result is
made fit to run (setuid and setgid bits removed, a ``python`` command where ``python3`` exists),
described (every Debian package and its version, what was approximated) and published under
its digest in one rename. A build that stops half way (an error, ``kill -9``) leaves only its
staging folder, which the next build sweeps (:meth:`ImageStore.staging`).

A recipe's digest names its build: building a recipe the store has seen before is a lookup and
runs nothing. ``mmdebstrap`` runs as the invoking user in its ``unshare`` mode; as root (CI, these
machines) that mode keeps root's own user namespace and unshares mount and PID namespaces only,
so the archive's maintainer scripts run as root in a chroot, as in any Debian install. What
they are is Debian's: apt verifies the archive's signature against the host's Debian keyring,
and a recipe's ``mirror`` is a bare URL (no ``[trusted=yes]`` or other sources options). It runs
under ``unshare --pid --kill-child`` so that killing the build kills every process it started
(``mmdebstrap`` forks helpers that a parent-death signal alone would orphan).

Network: ``mmdebstrap`` runs on the host, before the image exists, with the building machine's
network (and its proxy variables). Every later step (pip, apt, shell lines, copies) runs with
network to the package registries only: its own network namespace, and assay's registry proxy
(:mod:`assay.environments.egress`) allowing Debian's archive, PyPI, npm and the recipe's
``mirror``, started for the build and stopped after it. apt finds the proxy in the build-only
configuration file (:data:`APT_BUILD_CONF`, removed before the image is digested, so the image
is what it would be without the proxy); the other tools in the proxy variables of the step's
environment, which the image does not keep. The image's ``notes`` say which hosts the steps
could reach and ``build_hosts`` lists them.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from assay.environments.build_sandbox import (
    DEFAULT_PATH,
    EGRESS_PORT,
    BuildUsers,
    StepEgress,
    build_users,
    lent_context,
    run_in_root,
    run_streamed,
)
from assay.environments.egress import EgressPolicy, RegistryProxy, policy_for
from assay.environments.host_proxy import host_proxies
from assay.environments.store import EnvironmentImage, ImageConfig, ImageStore, SourceKind
from assay.errors import InfraError, InputError, Problem, SuiteError
from assay.suites.confine import links_out, path_problem
from assay.suites.recipe import (
    AptStep,
    CopyStep,
    EnvStep,
    PipStep,
    Recipe,
    RunStep,
    UserStep,
    WorkdirStep,
    recipe_digest,
)

Progress = Callable[[str], None]

#: Wall-clock bounds: the base install, and each later step (pip, a shell line, apt).
MMDEBSTRAP_TIMEOUT_S = 1800.0
STEP_TIMEOUT_S = 3600.0
#: Where the recipe's folder is shown (read-only) to a copy step, for that step only.
CONTEXT_MOUNT = "/.assay-context"
#: Lets apt-get run as the build's root (apt otherwise drops to ``_apt`` for downloads, which a
#: one-uid user namespace does not have) and sends its downloads through the registry proxy.
#: Removed before the image is published.
APT_BUILD_CONF = "etc/apt/apt.conf.d/99assay-build"
APT_BUILD_SETTINGS = ('APT::Sandbox::User "root";\n'
                      f'Acquire::http::Proxy "http://127.0.0.1:{EGRESS_PORT}";\n'
                      f'Acquire::https::Proxy "http://127.0.0.1:{EGRESS_PORT}";\n')
#: The time every build says it is (``SOURCE_DATE_EPOCH``): mmdebstrap then leaves no logs,
#: machine id or caches that differ between builds, and Python byte-code compiled by the
#: packages' scripts and by pip is checked by hash rather than stamped with the build's time,
#: so the same recipe from the same archive gives the same root filesystem, and the same
#: image digest, on any machine (measured: two bookworm builds with python3-pytest, 9,451
#: entries, no byte different).
SOURCE_DATE_EPOCH = "946684800"
#: Files the finishing pass empties or removes: what a package's or a step's run leaves that
#: says when or where the build ran, never what the image does.
_UNREPRODUCIBLE = ("/var/log/apt/history.log /var/log/apt/term.log /var/log/apt/eipp.log.xz "
                   "/var/log/dpkg.log /var/log/alternatives.log /var/log/bootstrap.log "
                   "/var/cache/ldconfig/aux-cache /var/lib/dpkg/status-old "
                   "/var/lib/dpkg/diversions-old /var/lib/dpkg/statoverride-old "
                   "/var/cache/debconf/config.dat-old /var/cache/debconf/templates.dat-old "
                   "/var/cache/debconf/passwords.dat-old /var/cache/apt/pkgcache.bin "
                   "/var/cache/apt/srcpkgcache.bin")
#: What build steps see besides the recipe's own environment (not kept in the image).
BUILD_ENV = {"SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
             "DEBIAN_FRONTEND": "noninteractive", "PIP_BREAK_SYSTEM_PACKAGES": "1",
             "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_CACHE_DIR": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
#: Where the host's CA certificates are shown to build steps: a machine whose HTTPS goes
#: through an inspecting proxy trusts that proxy's certificate there, and the image's own
#: ``ca-certificates`` does not. The variables point pip, requests, curl, node and OpenSSL at it.
HOST_CA_MOUNT = "/.assay-host-ca.crt"
HOST_CA_NOTE = ("build steps trusted the building machine's CA certificates (for HTTPS "
                "through its proxy); the image keeps its own")
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                "NODE_EXTRA_CA_CERTS")
#: Host variables mmdebstrap keeps (a proxy the machine needs); nothing else of the caller's
#: environment (API keys among it) reaches the build.
PASSED_HOST_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "NO_PROXY")
#: Output that says a package the recipe names is not in the archive: the recipe's fault.
_MISSING_PACKAGE = ("Unable to locate package", "has no installation candidate",
                    "Version '", "is not available")


#: A copy step, run inside the image: ``$1`` source (under the context mount), ``$2``
#: destination (a folder's contents go into it; a file goes into a destination that ends with
#: ``/`` or is a folder, else becomes it), ``$3`` permission bits or empty. Owners become the
#: build's root; links are copied as links.
COPY_SCRIPT = r'''
set -e
src=$1; dest=$2; mode=$3
if [ -d "$src" ] && [ ! -L "$src" ]; then
  mkdir -p -- "$dest"
  cp -a --no-preserve=ownership -- "$src"/. "$dest"/
  if [ -n "$mode" ]; then
    (cd -- "$src" && find . -mindepth 1 ! -type l -print0) |
      (cd -- "$dest" && xargs -0r chmod -- "$mode")
  fi
else
  case "$dest" in
    */) mkdir -p -- "$dest"; dest="$dest$(basename -- "$src")" ;;
    *) if [ -d "$dest" ]; then dest="$dest/$(basename -- "$src")"
       else mkdir -p -- "$(dirname -- "$dest")"; fi ;;
  esac
  cp -a --no-preserve=ownership -- "$src" "$dest"
  if [ -n "$mode" ]; then chmod -- "$mode" "$dest"; fi
fi
'''


class BuildFailed(InputError):
    """A recipe step (or the package list) failed: the recipe must change. Carries the last
    lines of the failing command's output."""


@dataclass(frozen=True)
class BuildResult:
    """The image, and whether the store already had it (nothing was run)."""

    image: EnvironmentImage
    cached: bool


def build_recipe(recipe: Recipe, context: Path | None, store: ImageStore, *,
                 source_kind: SourceKind = "debian-recipe", source_label: str = "",
                 origin: Path | None = None, step_lines: Mapping[int, int] | None = None,
                 progress: Progress | None = None) -> BuildResult:
    """Build ``recipe`` (copies read from ``context``, already confined to it by the loader)
    into ``store``, or find it there. ``origin`` and ``step_lines`` (step index -> line) place
    a failing step in the recipe file."""
    say = progress or (lambda _line: None)
    source_digest = recipe_digest(recipe, context)
    hit = store.lookup_source(source_kind, source_digest)
    if hit is None:
        _confine_copies(recipe, context, origin, step_lines or {})
        with store.source_lock(source_kind, source_digest, say):
            hit = store.lookup_source(source_kind, source_digest)  # built while we waited
            if hit is None:
                return _build(recipe, context, store, source_kind, source_digest,
                              source_label, origin, step_lines, say)
    say(f"cached: {source_label or 'recipe'} is {hit.digest} (nothing to build)")
    return BuildResult(hit, True)


def _build(recipe: Recipe, context: Path | None, store: ImageStore, source_kind: SourceKind,
           source_digest: str, source_label: str, origin: Path | None,
           step_lines: Mapping[int, int] | None, say: Progress) -> BuildResult:
    """:func:`build_recipe`'s build, with the source's lock held."""
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise InfraError("mmdebstrap is not installed: run scripts/bootstrap.sh as root, or "
                         "apt-get install mmdebstrap")
    builder = _Builder(recipe, context, say, origin, dict(step_lines or {}))
    with store.staging() as rootfs, build_users(rootfs) as userns:
        builder.rootfs = rootfs
        builder.userns = userns
        if userns is not None:
            builder.notes.append(userns.note)
        try:
            builder.base(mmdebstrap)
            builder.pip()
            builder.steps()
        finally:
            builder.stop_proxy()
        config, packages = builder.finish()
        say("digesting the root filesystem")
        image = store.publish(rootfs, source_kind=source_kind, source_digest=source_digest,
                              source_label=source_label, config=config,
                              substitutions=[*recipe.substitutions, *builder.substitutions],
                              packages=packages, notes=builder.notes,
                              build_hosts=builder.build_hosts())
    say(f"built {image.digest} ({image.files:,} files, {image.bytes / 2**20:.0f} MiB)")
    return BuildResult(image, False)


def _confine_copies(recipe: Recipe, context: Path | None, origin: Path | None,
                    step_lines: Mapping[int, int]) -> None:
    """Every copied path inside ``context``, checked before anything runs. The recipe loader
    checks this too; a recipe may come from any translator (a Dockerfile's ``COPY`` lines), and
    a copy step's mount shows the whole folder, so the builder does not rely on it."""
    problems = []
    for index, step in enumerate(recipe.steps):
        if not isinstance(step, CopyStep):
            continue
        where = origin or Path("recipe")
        line = step_lines.get(index)
        field = f"steps.{index}.copy.src"
        if context is None:
            problems.append(Problem(where, line, field, "a copy step needs the recipe's "
                                    "folder (none was given)"))
            continue
        bad = path_problem(context, step.copy_.src, at=where, line=line, field=field)
        problems += [bad] if bad else links_out(context, context / step.copy_.src, at=where,
                                                line=line, field=field)
    if problems:
        raise SuiteError(problems)


def _wants_python(recipe: Recipe) -> bool:
    return bool(recipe.python or recipe.pip or "python3" in _names(recipe.packages)
                or any(isinstance(s, PipStep) for s in recipe.steps))


def _names(packages: Sequence[str]) -> set[str]:
    return {p.split("=", 1)[0] for p in packages}


class _Builder:
    """One build's state: the staging root, the environment and working directory the steps
    have reached, and what the record will say about it."""

    def __init__(self, recipe: Recipe, context: Path | None, say: Progress,
                 origin: Path | None, step_lines: dict[int, int]) -> None:
        self.recipe = recipe
        self.context = context
        self.say = say
        self.origin = origin
        self.step_lines = step_lines
        self.rootfs = Path()
        self.userns: BuildUsers | None = None
        self.env: dict[str, str] = {"PATH": DEFAULT_PATH, **recipe.env}
        self.workdir = recipe.workdir
        self.user = recipe.user
        self.notes: list[str] = []
        self.substitutions: list[str] = []
        self.sandboxed = False
        self.mounts: set[str] = set()
        self.policy: EgressPolicy = policy_for([recipe.mirror])
        self.proxy: RegistryProxy | None = None

    # -- the base -----------------------------------------------------------------------
    def packages(self) -> list[str]:
        """The recipe's packages, plus what its Python needs, each addition noted."""
        wanted = list(dict.fromkeys(self.recipe.packages))
        names = _names(wanted)
        python = _wants_python(self.recipe)
        pip = bool(self.recipe.pip or any(isinstance(s, PipStep) for s in self.recipe.steps))
        for name, needed, why in (
                ("python3", python, "the recipe asks for Python"),
                ("python3-pip", pip, "the recipe installs pip requirements"),
                ("python-is-python3", python, "so that a `python` command runs python3")):
            if needed and name not in names:
                wanted.append(name)
                names.add(name)
                self.notes.append(f"added Debian package {name}: {why}")
        return wanted

    def base(self, mmdebstrap: str) -> None:
        packages = self.packages()
        self.say(f"mmdebstrap: Debian {self.recipe.suite} from {self.recipe.mirror}"
                 + (f" with {len(packages)} packages" if packages else ""))
        # As root, a PID namespace of its own whose end kills every helper mmdebstrap forked;
        # otherwise the parent-death signal reaches mmdebstrap alone.
        wrap = (["unshare", "--pid", "--fork", "--kill-child=SIGKILL"]
                if os.geteuid() == 0 and shutil.which("unshare") else [])
        argv = [*wrap, mmdebstrap, "--variant=apt", "--mode=unshare"]
        if packages:
            argv.append("--include=" + ",".join(packages))
        argv += [self.recipe.suite, str(self.rootfs), self.recipe.mirror]
        env = {"PATH": DEFAULT_PATH, "LC_ALL": "C.UTF-8", "HOME": "/root",
               "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
               **{k: os.environ[k] for k in PASSED_HOST_ENV if k in os.environ}}
        run = run_streamed(argv, env=env, timeout=MMDEBSTRAP_TIMEOUT_S,
                           line=lambda t: self.say(f"mmdebstrap: {t}")
                           if t[:3] in ("I: ", "W: ", "E: ") else None)
        code = run.returncode
        if not run.ok:
            text = "\n".join(run.tail)
            why = "timed out" if code is None else f"exited {code}"
            if any(m in text for m in _MISSING_PACKAGE):
                raise SuiteError([Problem(self.origin or Path("recipe"), None, "packages",
                                          f"mmdebstrap {why}: a package is not in Debian "
                                          f"{self.recipe.suite}:\n{text}")])
            raise InfraError(f"mmdebstrap {why} building Debian {self.recipe.suite} from "
                             f"{self.recipe.mirror}:\n{text}")
        conf = self.rootfs / APT_BUILD_CONF
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(APT_BUILD_SETTINGS)

    # -- the sandboxed part -------------------------------------------------------------
    def sandboxed_run(self, what: str, command: Sequence[str], *, index: int | None = None,
                      ro_binds: Sequence[tuple[Path, str]] = ()) -> list[str]:
        """Run a step's command in the image; a failure is the recipe's (:class:`BuildFailed`,
        placed at the step's line when known)."""
        if not self.sandboxed:
            self.sandboxed = True
            self.notes.append(egress_note(self.policy))
        if self.proxy is None:
            try:
                upstream = host_proxies()
            except ValueError as exc:
                raise InfraError(f"cannot give the build steps their network: {exc}") from None
            self.proxy = RegistryProxy(self.policy, upstream=upstream)
        refused_before = len(self.proxy.stats.refused_hosts)
        env = {**self.env, **BUILD_ENV, "HOME": "/root"}
        binds = list(ro_binds)
        ca = host_ca_bundle()
        if ca is not None:
            self.reserve(HOST_CA_MOUNT, directory=False)
            binds.append((ca, HOST_CA_MOUNT))
            if HOST_CA_NOTE not in self.notes:
                self.notes.append(HOST_CA_NOTE)
            env.update(dict.fromkeys(CA_VARIABLES, HOST_CA_MOUNT))
        script = 'mkdir -p -- "$1" && cd -- "$1" && shift && exec "$@"'
        run = run_in_root(self.rootfs, ["/bin/sh", "-c", script, "assay-step", self.workdir,
                                        *command],
                          env=env, ro_binds=binds, timeout=STEP_TIMEOUT_S,
                          userns=self.userns, egress=StepEgress(self.proxy.socket_path))
        if run.infra:
            raise InfraError(f"{what}: {run.egress_failure}")
        if not run.ok or run.egress_failure:
            why = (run.egress_failure if run.egress_failure else
                   f"timed out after {STEP_TIMEOUT_S:.0f} s" if run.returncode is None
                   else f"exited {run.returncode}")
            output = "\n".join(run.tail) or "(no output)"
            message = f"{what} {why}; its last output:\n{output}"
            refused = self.proxy.stats.refused_hosts[refused_before:]
            if refused:
                message += (f"\n(the build's network is the package registries only: the "
                            f"proxy refused {', '.join(refused)}; allowed: "
                            f"{', '.join(self.policy.allowed())})")
            if self.origin is not None:
                line = self.step_lines.get(index) if index is not None else None
                field = f"steps.{index}" if index is not None else "pip"
                raise BuildFailed(str(Problem(self.origin, line, field, message)))
            raise BuildFailed(message)
        return run.tail

    def stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.close()

    def build_hosts(self) -> list[str] | None:
        """``host:port`` pairs the steps could reach; None when no step had network."""
        if not self.sandboxed:
            return None
        return self.policy.reachable()

    def reserve(self, inside: str, *, directory: bool) -> None:
        """Make the mount point ``inside`` (an empty file or folder the build owns), refusing
        a path a step has put something else at: a link there would lead the mount
        elsewhere."""
        path = self.rootfs / inside.lstrip("/")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            path.mkdir() if directory else path.touch()
            self.mounts.add(inside)
            return
        kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
        if inside not in self.mounts or not kind_ok or (not directory and st.st_size):
            raise BuildFailed(f"{inside} exists in the image; that path is reserved for the "
                              "build's own mounts")

    def pip(self) -> None:
        if self.recipe.pip:
            self.say("pip: " + " ".join(self.recipe.pip))
            self.sandboxed_run("pip install", ["python3", "-m", "pip", "install",
                                               *self.recipe.pip])

    def steps(self) -> None:
        total = len(self.recipe.steps)
        for i, step in enumerate(self.recipe.steps):
            label = f"step {i + 1}/{total}"
            if isinstance(step, RunStep):
                first = step.run.strip().splitlines()[0] if step.run.strip() else ""
                self.say(f"{label} run: {first[:100]}")
                self.sandboxed_run(f"{label} (run)", ["/bin/sh", "-c", step.run], index=i)
            elif isinstance(step, PipStep):
                self.say(f"{label} pip: {' '.join(step.pip)}")
                self.sandboxed_run(f"{label} (pip)", ["python3", "-m", "pip", "install",
                                                      *step.pip], index=i)
            elif isinstance(step, AptStep):
                self.say(f"{label} apt: {' '.join(step.apt)}"
                         + (" (with Recommends)" if step.recommends else ""))
                # with Recommends: apt's default, so a configuration an earlier step wrote
                # (APT::Install-Recommends) is honoured as Docker's apt would honour it
                script = ("apt-get update -qq && apt-get install -y -qq "
                          + ("" if step.recommends else "--no-install-recommends ")
                          + "\"$@\" && apt-get clean && rm -rf /var/lib/apt/lists/*")
                self.sandboxed_run(f"{label} (apt)", ["/bin/sh", "-c", script, "apt",
                                                      *step.apt], index=i)
            elif isinstance(step, CopyStep):
                self.copy(label, i, step)
            elif isinstance(step, EnvStep):
                self.say(f"{label} env: {', '.join(step.env)}")
                self.env.update(step.env)
            elif isinstance(step, WorkdirStep):
                self.say(f"{label} workdir: {step.workdir}")
                self.workdir = (step.workdir if step.workdir.startswith("/")
                                else os.path.normpath(os.path.join(self.workdir,
                                                                   step.workdir)))
            elif isinstance(step, UserStep):
                self.say(f"{label} user: {step.user}")
                self.user = step.user

    def copy(self, label: str, index: int, step: CopyStep) -> None:
        """Copy from the recipe's folder, inside the sandbox: the destination is resolved in
        the image (its symbolic links lead within the image, never to the host's files)."""
        spec = step.copy_
        self.say(f"{label} copy: {spec.src} -> {spec.dest}")
        if self.context is None:
            raise BuildFailed(f"{label}: a copy step needs the recipe's folder")
        mount = self.rootfs / CONTEXT_MOUNT.lstrip("/")
        self.reserve(CONTEXT_MOUNT, directory=True)
        src = f"{CONTEXT_MOUNT}/{spec.src}"
        try:
            with lent_context(self.context, self.userns) as shown:
                self.sandboxed_run(f"{label} (copy {spec.src})",
                                   ["/bin/sh", "-c", COPY_SCRIPT, "copy", src, spec.dest,
                                    spec.mode or ""],
                                   index=index, ro_binds=[(shown, CONTEXT_MOUNT)])
        finally:
            os.rmdir(mount)
            self.mounts.discard(CONTEXT_MOUNT)

    # -- the result ---------------------------------------------------------------------
    def finish(self) -> tuple[ImageConfig, dict[str, str]]:
        """Last touches inside the image (no build configuration left behind, a ``python``
        command, the working directory), then what the record says: packages, Python."""
        script = (f'rm -f /{APT_BUILD_CONF} {HOST_CA_MOUNT} {_UNREPRODUCIBLE}\n'
                  'rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb\n'
                  # the building machine's name and resolver, never the image's business
                  'printf "localhost\\n" > /etc/hostname\n'
                  ': > /etc/resolv.conf\n'
                  'mkdir -p -- "$1"\n'
                  'if [ -e /usr/bin/python3 ] && [ ! -e /usr/bin/python ] '
                  '&& [ ! -L /usr/bin/python ]; then '
                  'ln -s python3 /usr/bin/python && echo "@linked"; fi\n')
        run = run_in_root(self.rootfs, ["/bin/sh", "-c", script, "finish", self.workdir],
                          env={"PATH": DEFAULT_PATH}, network=False,
                          timeout=STEP_TIMEOUT_S, userns=self.userns)
        packages: dict[str, str] = {}
        if not run.ok:
            raise InfraError("could not finish the image: " + "\n".join(run.tail))
        for text in _package_lines(self.rootfs, self.userns):
            name, _, version = text[len("@pkg "):].partition("\t")
            packages[name] = version
        if any(t == "@linked" for t in run.tail):
            self.notes.append("linked /usr/bin/python -> python3 (no `python` command)")
        stripped = strip_setid(self.rootfs)
        if stripped:
            self.notes.append(f"removed the setuid/setgid bits of {stripped} files "
                              "(the sandbox never raises privileges)")
        if self.user != "root":
            self.notes.append(f"the steps after `user: {self.user}` ran as root (uid 0 of "
                              "the build's user namespace)")
        self.python_substitution(packages)
        env = dict(self.env)
        config = ImageConfig(env=env, workdir=self.workdir, user=self.user)
        return config, packages

    def python_substitution(self, packages: Mapping[str, str]) -> None:
        asked = self.recipe.python
        have = packages.get("python3")
        if not asked or not have:
            return
        got = ".".join(have.split(":")[-1].split(".")[:2])
        if got != asked:
            self.substitutions.append(f"python {asked} asked for; Debian "
                                      f"{self.recipe.suite}'s python3 is {have.split('-')[0]}")


def egress_note(policy: EgressPolicy) -> str:
    """What the image's ``notes`` say of the build's network."""
    mirrors = "".join(f" and {h}:{p}" for h, p in sorted(policy.endpoints))
    return ("build steps had no network but assay's registry proxy, which allowed "
            f"{', '.join(sorted(policy.hosts))} (ports "
            f"{', '.join(str(p) for p in sorted(policy.ports))}){mirrors}; the base install "
            "(mmdebstrap, on the host) used the building machine's network")


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine's own HTTPS trusts (``$SSL_CERT_FILE``, else Debian's)."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return Path(candidate)
    return None


def _package_lines(rootfs: Path, userns: BuildUsers | None) -> list[str]:
    """Every installed package as ``@pkg name\\tversion``, read inside the image (its dpkg
    database may name anything; read on the host it could be a link to a host file)."""
    lines: list[str] = []
    if not os.path.lexists(rootfs / "usr/bin/dpkg-query"):
        return lines  # a base without dpkg (built on a real base): no package list to give
    run = run_in_root(rootfs, ["dpkg-query", "-W", "-f", "@pkg ${Package}\\t${Version}\\n"],
                      env={"PATH": DEFAULT_PATH}, writable=False, network=False,
                      timeout=STEP_TIMEOUT_S, userns=userns,
                      line=lambda t: lines.append(t) if t.startswith("@pkg ") else None)
    if not run.ok:
        raise InfraError("dpkg-query failed in the built image: " + "\n".join(run.tail))
    return lines


def strip_setid(rootfs: Path) -> int:
    """Clear setuid and setgid bits below ``rootfs`` (never following a link); the count of
    entries changed."""
    changed = 0
    for dirpath, dirnames, filenames in os.walk(rootfs, followlinks=False):
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or not st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                continue
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            changed += 1
    return changed
