"""The sandbox against real bubblewrap, python3 and node: no mocks.

Hostile programs must be contained *and* recorded with the right reason; none of them may disturb
this test process or the host (each test checks what it could have damaged).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from assay.sandbox import (
    KILL_GRACE_SECONDS,
    NOT_APPLIED,
    REASONS,
    SANDBOX_WORKDIR,
    TAIL_BYTES,
    ExecResult,
    Limits,
    Mount,
    SandboxUnavailable,
    bwrap_available,
    run_sandboxed,
)

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FAST = Limits(wall_seconds=20.0, memory_mib=512, pids=64)


@pytest.fixture(autouse=True)
def no_cgroups_left_behind():
    """After every test, none of this process's per-execution cgroups may remain."""
    yield
    for controller in ("memory", "pids", "cpu"):
        for d in _cgroup_dirs(controller):
            assert list(d.glob(f"assay-{os.getpid()}-*")) == [], d


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def py(code: str, workdir: Path, **kw) -> ExecResult:
    kw.setdefault("limits", FAST)
    res = run_sandboxed(["python3", "-c", code], workdir, **kw)
    json.dumps(res.to_record())  # every result must be JSON-serialisable
    assert res.reason in REASONS
    return res


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker``."""
    found = []
    needle = marker.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry.name))
        except OSError:
            pass
    return found


def _cgroup_dirs(controller: str) -> list[Path]:
    """This process's own cgroup directory for ``controller`` (v1) and the v2 one."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, ctrls, path = line.split(":", 2)
        if hid == "0":
            for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (base / "cgroup.controllers").exists():
                    out.append(base / path.lstrip("/"))
        elif controller in ctrls.split(","):
            out.append(Path("/sys/fs/cgroup") / ctrls / path.lstrip("/"))
    return [d for d in out if d.is_dir()]


def expected_cgroup_mechanism(controller: str) -> str:
    """What this machine should give us, judged independently of the code under test:
    "cgroup_v1" (only a writable v1 hierarchy offers the controller), "none" (no writable
    cgroup offers it) or "unknown" (v2 offers it: depends on delegation, not predicted here)."""
    v1_writable = False
    for d in _cgroup_dirs(controller):
        if (d / "cgroup.controllers").exists():
            if controller in (d / "cgroup.controllers").read_text().split():
                return "unknown"
        elif os.access(d, os.W_OK):
            v1_writable = True
    return "cgroup_v1" if v1_writable else "none"


# --------------------------------------------------------------------------------------------
# ordinary behaviour


def test_ok_tails_counts_and_record_files(workdir: Path, tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    res = py(
        "import sys, os; print('hello out'); print('hello err', file=sys.stderr);"
        "print(os.getcwd(), os.environ['HOME'], os.environ['TMPDIR'], os.environ['LANG'])",
        workdir,
        record_dir=rec,
    )
    assert res.reason == "ok" and res.ok
    assert res.exit_code == 0 and res.signal is None and not res.timed_out
    assert res.isolation == "bwrap" and res.sandbox_workdir == SANDBOX_WORKDIR == "/work"
    assert res.stdout_tail.splitlines() == ["hello out", "/work /work /tmp C.UTF-8"]
    assert res.stderr_tail == "hello err\n"
    assert res.stdout_bytes == len(res.stdout_tail.encode()) and res.stderr_bytes == 10
    assert Path(res.stdout_path).read_text() == res.stdout_tail
    assert Path(res.stderr_path).read_text() == "hello err\n"
    assert 0 < res.wall_seconds < 10


def test_stdin_is_passed(workdir: Path) -> None:
    data = b"line one\n" + b"x" * 200_000 + b"\nend\n"  # larger than a pipe buffer
    res = py(
        "import sys; d = sys.stdin.buffer.read(); print(len(d), d[:8].decode(), d[-4:].decode())",
        workdir,
        stdin=data,
    )
    assert res.reason == "ok"
    assert res.stdout_tail.split() == [str(len(data)), "line", "one", "end"]


def test_node_runs(workdir: Path) -> None:
    (workdir / "main.js").write_text("console.log(JSON.stringify({sum: 1+2, cwd: process.cwd()}))")
    res = run_sandboxed(["node", "main.js"], workdir, limits=FAST)
    assert res.reason == "ok", res.stderr_tail
    assert json.loads(res.stdout_tail) == {"sum": 3, "cwd": "/work"}


def test_fake_all_tests_passed_with_exit_1_is_nonzero_exit(workdir: Path) -> None:
    res = py("print('== 12 passed in 0.01s ==\\nall tests passed'); raise SystemExit(1)", workdir)
    assert res.reason == "nonzero_exit"
    assert res.exit_code == 1 and res.signal is None
    assert "all tests passed" in res.stdout_tail


def test_output_is_capped_on_disk_but_counted_and_tailed(workdir: Path, tmp_path: Path) -> None:
    limits = Limits(wall_seconds=20, memory_mib=512, pids=64, output_bytes=1000)
    res = py(
        "import sys; sys.stdout.write('a' * 100000 + 'END\\n')",
        workdir,
        limits=limits,
        record_dir=tmp_path / "rec",
    )
    assert res.reason == "ok"
    assert res.stdout_bytes == 100004
    assert res.stdout_truncated and not res.stderr_truncated
    assert Path(res.stdout_path).stat().st_size == 1000
    assert len(res.stdout_tail) == TAIL_BYTES and res.stdout_tail.endswith("aEND\n")


def test_missing_command_is_sandbox_error_and_cannot_be_faked(workdir: Path) -> None:
    res = run_sandboxed(["no-such-command-xyz"], workdir, limits=FAST)
    assert res.reason == "sandbox_error"
    assert "no-such-command-xyz" in (res.detail or "")
    # A program printing bwrap's error text and failing is still just a failing program.
    fake = py(
        "import sys; print('bwrap: execvp x: No such file or directory', file=sys.stderr);"
        "sys.exit(1)",
        workdir,
    )
    assert fake.reason == "nonzero_exit"


def test_sandbox_identity_and_namespaces(workdir: Path) -> None:
    res = py(
        "import os, socket, getpass, json\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
        "print(json.dumps({'pid': os.getpid(), 'uid': os.getuid(), 'user': getpass.getuser(),"
        " 'host': socket.gethostname(), 'caps': caps,"
        " 'procs': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}))",
        workdir,
    )
    assert res.reason == "ok", res.stderr_tail
    info = json.loads(res.stdout_tail)
    assert info["pid"] <= 3  # new PID namespace: bwrap's reaper is 1
    assert len(info["procs"]) <= 3
    assert info["uid"] == 1000 and info["user"] == "sandbox" and info["host"] == "sandbox"
    assert int(info["caps"], 16) == 0


def test_concurrent_executions_from_threads(workdir: Path, tmp_path: Path) -> None:
    dirs = []
    for i in range(4):
        d = tmp_path / f"w{i}"
        d.mkdir()
        (d / "n.txt").write_text(str(i))
        dirs.append(d)

    async def main() -> list[ExecResult]:
        return await asyncio.gather(
            *(
                asyncio.to_thread(
                    run_sandboxed, ["python3", "-c", "print(open('n.txt').read())"], d, limits=FAST
                )
                for d in dirs
            )
        )

    results = asyncio.run(main())
    assert [r.reason for r in results] == ["ok"] * 4
    assert [r.stdout_tail.strip() for r in results] == ["0", "1", "2", "3"]


# --------------------------------------------------------------------------------------------
# hostile programs


def test_host_environment_is_not_visible(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    # Inside bwrap, also look at every process the sandbox can see (its /proc is its own PID
    # namespace). Without isolation the host's /proc is visible, so only the env is checked.
    code = (
        "import os, json, glob, sys\n"
        "seen = []\n"
        "for p in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
        "    try: seen.append(open(p, 'rb').read().decode(errors='replace'))\n"
        "    except OSError: pass\n"
        "if sys.argv[1] != 'bwrap': seen = []\n"
        "print(json.dumps({'env': dict(os.environ), 'proc': seen}))"
    )
    for isolation in ("bwrap", "none"):
        res = run_sandboxed(
            ["python3", "-c", code, isolation],
            workdir,
            limits=FAST,
            env={"ASSAY_VISIBLE": "yes"},
            isolation=isolation,
        )
        assert res.reason == "ok", res.stderr_tail
        assert secret not in res.stdout_tail
        env = json.loads(res.stdout_tail)["env"]
        assert "OPENAI_API_KEY" not in env
        assert env["ASSAY_VISIBLE"] == "yes" and env["LANG"] == "C.UTF-8"
        assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD", "ASSAY_VISIBLE"}


def test_env_values_given_to_the_sandbox_stay_out_of_host_command_lines(workdir: Path) -> None:
    secret = "tok-" + uuid.uuid4().hex
    result: list[ExecResult] = []
    t = threading.Thread(
        target=lambda: result.append(
            py(
                "import os, pathlib, time;"
                "print(os.environ['TOKEN'] == 'tok-' + os.environ['TOKEN'][4:]);"
                "pathlib.Path('started').touch(); time.sleep(1.5)",
                workdir,
                env={"TOKEN": secret},
            )
        )
    )
    t.start()
    try:
        # look while the sandbox is certainly alive: after the child says it has started
        deadline = time.monotonic() + 20
        while not (workdir / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (workdir / "started").exists()
        assert processes_with(secret) == []  # not in bwrap's argv (it travels in a memfd)
    finally:
        t.join()
    assert result[0].reason == "ok" and result[0].stdout_tail.strip() == "True"


def test_host_paths_are_not_visible(workdir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not read")
    (workdir / "mine.txt").write_text("visible")
    probes = [str(secret), str(tmp_path), "/root", "/home", str(Path(__file__).resolve())]
    code = (
        "import os, json, sys\n"
        "probes = json.loads(sys.argv[1])\n"
        "print(json.dumps({'exists': {p: os.path.exists(p) for p in probes},"
        " 'ssh': os.path.exists(os.path.expanduser('~/.ssh')),"
        " 'shadow': os.path.exists('/etc/shadow'),"
        " 'root': sorted(os.listdir('/')), 'etc': sorted(os.listdir('/etc')),"
        " 'mine': open('mine.txt').read()}))"
    )
    res = run_sandboxed(["python3", "-c", code, json.dumps(probes)], workdir, limits=FAST)
    assert res.reason == "ok", res.stderr_tail
    seen = json.loads(res.stdout_tail)
    assert seen["exists"] == {p: False for p in probes}
    assert not seen["ssh"] and not seen["shadow"]
    allowed_top = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp"}
    assert set(seen["root"]) <= allowed_top | {"usr", "work"}
    assert "shadow" not in seen["etc"] and "pip.conf" not in seen["etc"]
    assert seen["mine"] == "visible"


def test_network_is_blocked(workdir: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except TimeoutError:
                continue
            accepted.append(addr)
            conn.sendall(b"hello from host\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    code = (
        "import socket, sys\n"
        "try:\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "    print('CONNECTED', s.recv(100))\n"
        "except OSError as e:\n"
        "    print('BLOCKED', type(e).__name__)\n"
        "try:\n"
        "    socket.create_connection(('example.com', 80), timeout=3); print('INTERNET')\n"
        "except OSError as e:\n"
        "    print('NO-INTERNET', type(e).__name__)\n"
    )
    try:
        blocked = py(code, workdir)
        assert blocked.reason == "ok", blocked.stderr_tail
        assert "BLOCKED" in blocked.stdout_tail and "CONNECTED" not in blocked.stdout_tail
        assert "NO-INTERNET" in blocked.stdout_tail
        assert accepted == []
        # control: the same program with the host network does reach the server
        control = py(code, workdir, network="host")
        assert "CONNECTED" in control.stdout_tail and len(accepted) == 1
    finally:
        stop.set()
        t.join()
        server.close()


def test_writes_outside_the_workdir_do_not_reach_the_host(workdir: Path, tmp_path: Path) -> None:
    host_file = tmp_path / "outside.txt"
    host_file.write_text("original")
    tmp_name = f"/tmp/assay-sandbox-{uuid.uuid4().hex}"
    targets = [str(host_file), "/etc/passwd", "/usr/evil", "/evil", "/dev/evil", tmp_name]
    code = (
        "import json, sys\n"
        "out = {}\n"
        "for p in json.loads(sys.argv[1]) + ['/work/inside.txt']:\n"
        "    try:\n"
        "        open(p, 'w').write('pwned'); out[p] = 'written'\n"
        "    except OSError as e:\n"
        "        out[p] = type(e).__name__\n"
        "print(json.dumps(out))"
    )
    res = run_sandboxed(["python3", "-c", code, json.dumps(targets)], workdir, limits=FAST)
    assert res.reason == "ok", res.stderr_tail
    out = json.loads(res.stdout_tail)
    assert out[str(host_file)] == "FileNotFoundError"  # the host path does not exist inside
    for p in ("/etc/passwd", "/usr/evil", "/evil", "/dev/evil"):
        assert out[p] != "written", p
    assert out[tmp_name] == "written"  # private tmpfs, thrown away
    assert out["/work/inside.txt"] == "written"
    assert host_file.read_text() == "original"
    assert not Path(tmp_name).exists()
    assert (workdir / "inside.txt").read_text() == "pwned"


def test_fork_bomb_is_contained(workdir: Path) -> None:
    marker = "bomb-" + uuid.uuid4().hex
    code = f"# {marker}\nimport os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n"
    limits = Limits(wall_seconds=2.0, memory_mib=256, pids=32)
    t0 = time.monotonic()
    res = py(code, workdir, limits=limits)
    assert time.monotonic() - t0 < 2.0 + KILL_GRACE_SECONDS + 5
    assert processes_with(marker) == []  # nothing survived on the host
    mech = res.limits_applied["pids"].mechanism
    if mech.startswith("cgroup"):
        assert res.reason == "process_limit"
        assert res.evidence["pid_limit_hits"] > 0
        assert res.evidence.get("pids_peak", 0) <= 32 + 2
    else:
        assert res.reason in ("process_limit", "timeout")
    # the host is not disturbed: this process can still start processes, so can the sandbox
    assert py("print('still fine')", workdir).reason == "ok"


def test_memory_hog_is_killed_and_recorded(workdir: Path) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    res = py(code, workdir, limits=Limits(wall_seconds=20, memory_mib=128, pids=64))
    assert res.reason == "memory_limit", (res.reason, res.detail, res.stderr_tail)
    assert res.exit_code is None
    if res.limits_applied["memory_mib"].mechanism.startswith("cgroup"):
        assert res.evidence["oom_kills"] >= 1 and res.signal == "SIGKILL"
        assert res.evidence["memory_peak_bytes"] <= 128 * 1024 * 1024


def test_sigterm_ignoring_process_tree_dies_on_timeout(workdir: Path) -> None:
    marker = "stubborn-" + uuid.uuid4().hex
    code = (
        f"# {marker}\n"
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = ('import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);'\n"
        "         'os.setsid(); time.sleep(1000)')\n"
        f"subprocess.Popen([sys.executable, '-c', child + '  # {marker}'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(1000)\n"
    )
    # 3 s: time enough for "ready" on a loaded machine (python start plus one spawn)
    res = py(code, workdir, limits=Limits(wall_seconds=3.0, memory_mib=256, pids=32))
    assert res.reason == "timeout" and res.timed_out
    assert res.exit_code is None and res.signal == "SIGKILL"
    assert "ready" in res.stdout_tail
    assert res.wall_seconds < 3.0 + KILL_GRACE_SECONDS + 1.5
    assert processes_with(marker) == []


def test_sigterm_is_tried_first(workdir: Path) -> None:
    code = (
        "import signal, sys, time\n"
        "def bye(*a):\n"
        "    print('got SIGTERM', flush=True); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True); time.sleep(1000)\n"
    )
    # 2 s: the handler must be installed before the watchdog fires, even on a loaded machine
    res = py(code, workdir, limits=Limits(wall_seconds=2.0, memory_mib=256, pids=32))
    assert res.reason == "timeout"
    assert "ready" in res.stdout_tail and "got SIGTERM" in res.stdout_tail
    assert res.wall_seconds < 2.0 + KILL_GRACE_SECONDS


def test_cpu_time_limit(workdir: Path) -> None:
    res = py(
        "while True: pass",
        workdir,
        limits=Limits(wall_seconds=20, memory_mib=256, pids=32, cpu_seconds=1),
    )
    assert res.limits_applied["cpu_seconds"].mechanism == "rlimit_cpu"
    assert res.reason == "timeout" and not res.timed_out
    assert res.signal == "SIGXCPU" and "RLIMIT_CPU" in (res.detail or "")


# --------------------------------------------------------------------------------------------
# mounts and isolation="none"


def test_readonly_and_writable_mounts(workdir: Path, tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_x.py").write_text("def test_x(): pass\n")
    # open to every user, so only the read-only mount can refuse the writes (the sandbox's
    # user is not the host's root that owns them when ids are mapped)
    (hidden / "test_x.py").chmod(0o666)
    hidden.chmod(0o777)
    shared = tmp_path / "shared"
    shared.mkdir()
    code = (
        "import json, os\n"
        "out = {'read': open('/assay/tests/test_x.py').read()}\n"
        "for p in ('/assay/tests/test_x.py', '/assay/tests/new.py', '/assay/out/result.txt'):\n"
        "    try: open(p, 'a').write('pwned'); out[p] = 'written'\n"
        "    except OSError as e: out[p] = type(e).__name__\n"
        "print(json.dumps(out))"
    )
    res = py(
        code,
        workdir,
        mounts=[Mount(hidden, "/assay/tests"), Mount(shared, "/assay/out", writable=True)],
    )
    assert res.reason == "ok", res.stderr_tail
    out = json.loads(res.stdout_tail)
    assert out["read"] == "def test_x(): pass\n"
    assert out["/assay/tests/test_x.py"] == "OSError"  # EROFS
    assert out["/assay/tests/new.py"] == "OSError"
    assert out["/assay/out/result.txt"] == "written"
    assert sorted(os.listdir(hidden)) == ["test_x.py"]
    assert (hidden / "test_x.py").read_text() == "def test_x(): pass\n"
    assert (shared / "result.txt").read_text() == "pwned"


def test_mount_arguments_are_checked(workdir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_sandboxed(["true"], workdir, mounts=[Mount(tmp_path / "missing", "/x")])
    for bad in ("relative", "/", "/proc/x", "/work", "/a/../b"):
        with pytest.raises(ValueError):
            run_sandboxed(["true"], workdir, mounts=[Mount(tmp_path, bad)])


def test_isolation_none_runs_and_is_labelled(workdir: Path) -> None:
    res = py("import os; print(os.getcwd()); print(os.environ['HOME'])", workdir, isolation="none")
    assert res.reason == "ok"
    assert res.isolation == "none" and res.to_record()["isolation"] == "none"
    assert res.sandbox_workdir is None and res.network == "host"
    assert res.stdout_tail.split() == [str(workdir), str(workdir)]
    assert any("not enforced" in w for w in res.warnings)
    killed = py(
        "import time; time.sleep(100)",
        workdir,
        isolation="none",
        limits=Limits(wall_seconds=0.5, memory_mib=256, pids=32),
    )
    assert killed.reason == "timeout" and killed.signal == "SIGTERM"
    with pytest.raises(ValueError):
        run_sandboxed(["true"], workdir, isolation="none", mounts=[Mount(workdir, "/x")])


# --------------------------------------------------------------------------------------------
# limits_applied tells the truth


READ_LIMITS = (
    "import resource as r, json\n"
    "print(json.dumps({n: r.getrlimit(getattr(r, n))[0] for n in"
    " ('RLIMIT_DATA', 'RLIMIT_NPROC', 'RLIMIT_CPU', 'RLIMIT_AS')}))"
)


def test_limits_applied_with_cgroups(workdir: Path) -> None:
    limits = Limits(wall_seconds=7, memory_mib=200, pids=40, cpu_seconds=9)
    res = py(READ_LIMITS, workdir, limits=limits)
    assert res.reason == "ok", res.stderr_tail
    applied = res.limits_applied
    seen = json.loads(res.stdout_tail)
    assert applied["wall_seconds"].mechanism == "watchdog" and applied["wall_seconds"].value == 7
    assert applied["cpu_seconds"].mechanism == "rlimit_cpu" and seen["RLIMIT_CPU"] == 9
    for key, controller in (("memory_mib", "memory"), ("pids", "pids")):
        expected = expected_cgroup_mechanism(controller)
        if expected == "cgroup_v1":
            assert applied[key].mechanism == "cgroup_v1"
        elif expected == "none":
            assert not applied[key].mechanism.startswith("cgroup")
    if applied["memory_mib"].mechanism.startswith("cgroup"):
        assert applied["memory_mib"].value == 200
        assert seen["RLIMIT_DATA"] == -1  # the cgroup does it; no rlimit pretends to
        assert res.evidence["memory_peak_bytes"] > 0  # the run really was in the cgroup
        assert res.evidence["oom_kills"] == 0
    if applied["pids"].mechanism.startswith("cgroup"):
        assert res.evidence["pids_peak"] >= 1 and res.evidence["pid_limit_hits"] == 0
    # (the autouse fixture checks that the cgroups are gone afterwards)


BUSY_LOOP_CPU_SHARE = (
    "import time\n"
    "w0, c0 = time.monotonic(), time.process_time()\n"
    "while time.monotonic() - w0 < 1.5:\n"
    "    pass\n"
    "print(round((time.process_time() - c0) / (time.monotonic() - w0), 3))\n"
)


def test_cpu_quota_throttles_and_says_so(workdir: Path) -> None:
    res = py(BUSY_LOOP_CPU_SHARE, workdir,
             limits=Limits(wall_seconds=20, memory_mib=256, pids=32, cpu_cores=0.1))
    assert res.reason == "ok", res.stderr_tail
    cpu = res.limits_applied["cpu_cores"]
    expected = expected_cgroup_mechanism("cpu")
    if expected == "none":
        assert cpu.mechanism == NOT_APPLIED and "cgroup" in (cpu.reason or "")
        assert "cpu_throttled_periods" not in res.evidence
        pytest.skip("no cgroup cpu controller here: the quota is recorded as not applied, "
                    "so there is no throttling to measure")
    if expected == "cgroup_v1":
        assert cpu.mechanism == "cgroup_v1"
    if cpu.mechanism == NOT_APPLIED:
        pytest.skip("cgroup v2 without the cpu controller delegated: nothing claimed, "
                    "nothing to measure")
    assert cpu.value == 0.1 and "10000 us per 100000 us" in (cpu.note or "")
    # the kernel's own counter, and the busy loop's share of one CPU (a tenth, plus slack
    # for the period boundaries; an unthrottled loop on an idle core reads close to 1.0).
    # A tenth is low enough that the loop outruns its quota even on a busy machine.
    assert res.evidence["cpu_throttled_periods"] > 0
    assert res.evidence["cpu_throttled_ms"] > 0
    assert float(res.stdout_tail) < 0.4


def test_a_timeout_under_the_cpu_quota_says_it_was_held_back(workdir: Path) -> None:
    res = py("while True: pass", workdir,
             limits=Limits(wall_seconds=1.0, memory_mib=256, pids=32, cpu_cores=0.1))
    assert res.reason == "timeout"
    if res.limits_applied["cpu_cores"].mechanism == NOT_APPLIED:
        assert "CPU quota" not in (res.detail or "")
        pytest.skip("no CPU quota could be applied here, so none held the command back")
    periods = res.evidence["cpu_throttled_periods"]
    assert periods > 0 and f"held back by the CPU quota in {periods} period(s)" in res.detail


def test_no_cpu_quota_unless_asked(workdir: Path) -> None:
    res = py("print(1)", workdir)
    assert res.limits_applied["cpu_cores"].to_record() == {
        "value": None, "mechanism": NOT_APPLIED, "reason": "no CPU quota requested"}
    assert "cpu_throttled_periods" not in res.evidence


def test_cpu_cores_must_be_a_sensible_number() -> None:
    for bad in (0, -1, 0.001, "2"):
        with pytest.raises(ValueError, match="cpu_cores"):
            Limits(cpu_cores=bad)  # type: ignore[arg-type]


def test_limits_applied_forced_fallback_claims_nothing_it_does_not_do(workdir: Path) -> None:
    limits = Limits(wall_seconds=7, memory_mib=200, pids=40, cpu_seconds=None)
    res = py(READ_LIMITS, workdir, limits=limits, use_cgroups=False)
    assert res.reason == "ok", res.stderr_tail
    applied = {k: v.to_record() for k, v in res.limits_applied.items()}
    assert not any(a["mechanism"].startswith("cgroup") for a in applied.values())
    assert res.evidence == {}
    seen = json.loads(res.stdout_tail)
    assert applied["memory_mib"]["mechanism"] == "rlimit_data"
    assert seen["RLIMIT_DATA"] == 200 * 1024 * 1024
    assert seen["RLIMIT_AS"] == -1
    if os.getuid() == 0:
        assert applied["pids"]["mechanism"] == NOT_APPLIED
        assert "uid 0" in applied["pids"]["reason"]
    else:
        assert applied["pids"]["mechanism"] == "rlimit_nproc" and seen["RLIMIT_NPROC"] != -1
    assert applied["cpu_seconds"] == {
        "value": None,
        "mechanism": NOT_APPLIED,
        "reason": "no CPU-time limit requested",
    }
    assert seen["RLIMIT_CPU"] == -1


def test_memory_hog_under_rlimit_fallback_is_inferred_honestly(workdir: Path) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    res = py(code, workdir, limits=Limits(wall_seconds=20, memory_mib=128), use_cgroups=False)
    assert res.limits_applied["memory_mib"].mechanism == "rlimit_data"
    assert res.reason == "memory_limit"
    assert res.exit_code == 1 and "MemoryError" in res.stderr_tail
    assert "inferred" in (res.detail or "")


def test_unavailable_error_carries_reason() -> None:
    err = SandboxUnavailable("bwrap executable not found")
    assert err.reason == "bwrap executable not found" and "not found" in str(err)
    assert bwrap_available() is True
