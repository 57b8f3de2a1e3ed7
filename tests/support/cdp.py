"""A small headless-Chromium driver for the browser tests: the DevTools protocol (CDP) over
``--remote-debugging-pipe``, standard library only.

Why not Playwright: its PyPI package ships a Node.js driver and expects a browser build of its
own (``playwright install``, which this closed network refuses); pointed at Debian's chromium it
works, but it adds a 40 MB dependency for what five CDP domains do here. Why a pipe and not the
websocket: no port is opened on the machine, nothing else can attach to the browser, and no
websocket client is needed. The pipe protocol is the websocket's JSON messages, each ended by a
NUL byte, on the child's fds 3 (commands in) and 4 (replies and events out).

Every request a page makes is seen twice: ``Network.requestWillBeSent`` records it and
``Fetch.requestPaused`` refuses it (``BlockedByClient``) unless it is the page's own file. The
browser also runs with a proxy on a closed loopback port and a host resolver that finds nothing,
so a request the interception missed still could not leave the machine.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# The flags this machine's closed network needs (from the machine notes): without the
# background-networking ones Chromium keeps trying, and failing, to reach Google's hosts.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-default-browser-check", "--disable-extensions", "--disable-default-apps",
    "--mute-audio", "--hide-scrollbars", "--disable-dev-shm-usage",
    "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
]


class CDPError(Exception):
    """The browser answered a command with an error, or did not answer in time."""


def chromium() -> str | None:
    """The Debian chromium binary, when installed (``make test`` installs it).
    ``ASSAY_TEST_CHROMIUM`` names another binary; set empty, it makes the tests skip."""
    if "ASSAY_TEST_CHROMIUM" in os.environ:
        exe = os.environ["ASSAY_TEST_CHROMIUM"]
        return exe if exe and os.access(exe, os.X_OK) else None
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


@dataclass
class PageResult:
    """What one page load showed: console and exception messages, every request, the probe's
    answer and the screenshot."""

    url: str
    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    probe: Any = None
    png: bytes = b""

    @property
    def errors(self) -> list[str]:
        out = [f"exception: {e}" for e in self.exceptions]
        out += [f"dialog: {d}" for d in self.dialogs]
        out += [f"console.{c['type']}: {c['text']}" for c in self.console
                if c["type"] in ("error", "assert")]
        out += [f"log {e['source']}: {e['text']}" for e in self.log if e["level"] == "error"]
        return out


class Browser:
    """One headless Chromium for a whole test module; ``load`` opens a page in a fresh tab."""

    def __init__(self, exe: str, profile: Path, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._next = 0
        self._buf = b""
        self._events: list[dict[str, Any]] = []
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        # Move the child's ends above the fds a redirection could clash with (bash, not dash:
        # dash takes single-digit fds only).
        hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_r)
        os.close(out_w)
        argv = [exe, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                "about:blank"]
        script = (f"exec {shlex.join(argv)} 3<&{hi_r} 4>&{hi_w} {hi_r}<&- {hi_w}>&-")
        self.stderr_path = profile.with_suffix(".stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(["/bin/bash", "-c", script], pass_fds=(hi_r, hi_w),
                                         stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         start_new_session=True)
        os.close(hi_r)
        os.close(hi_w)
        self._w, self._r = cmd_w, out_r

    # ------------------------------------------------------------------ protocol

    def _send(self, method: str, params: dict[str, Any] | None = None,
              session: str | None = None) -> int:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._w, data):]
        return self._next

    def _read_one(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"no message from the browser in {self.timeout:.0f} s")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 16)
                if not chunk:
                    raise CDPError("the browser closed its pipe: "
                                   + self.stderr_path.read_text(errors="replace")[-2000:])
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Send a command and wait for its reply; events that arrive meanwhile are handled by
        ``on_event`` (or kept)."""
        want = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read_one(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                (on_event or self._events.append)(msg)

    # ------------------------------------------------------------------ pages

    def load(self, path: Path, probe_js: str, width: int = 1200,
             height: int = 900, click: str | None = None,
             allow_under: Path | None = None) -> PageResult:
        """Open ``path`` (file://) in a new tab; record every console message, exception and
        request until the load event; evaluate ``probe_js`` (its JSON value is returned); take a
        full-page PNG screenshot; close the tab.

        ``click``: a CSS selector; after the load, the element is scrolled into view and
        clicked with the mouse (real input events at its centre), the navigation it starts is
        followed to its load event, and the probe and screenshot are of the page it led to.
        Files below ``allow_under`` may then load (every other request is still refused)."""
        url = path.resolve().as_uri()
        allowed = allow_under.resolve().as_uri() + "/" if allow_under is not None else None
        res = PageResult(url)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]
        loaded = []

        def on_event(ev: dict[str, Any]) -> None:
            if ev.get("sessionId") != sid:
                return
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", "")))
                                for a in p.get("args", []))
                res.console.append({"type": p.get("type"), "text": text})
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                res.exceptions.append(d.get("exception", {}).get("description") or
                                      d.get("text", "exception"))
            elif m == "Log.entryAdded":
                e = p.get("entry", {})
                res.log.append({"level": e.get("level"), "source": e.get("source"),
                                "text": e.get("text"), "url": e.get("url")})
            elif m == "Network.requestWillBeSent":
                res.requests.append(p["request"]["url"])
            elif m == "Fetch.requestPaused":
                rid, rurl = p["requestId"], p["request"]["url"]
                if rurl.split("#")[0] == url or (allowed and rurl.startswith(allowed)
                                                  and ".." not in rurl[len(allowed):]):
                    self._send("Fetch.continueRequest", {"requestId": rid}, sid)
                else:
                    res.refused.append(rurl)
                    self._send("Fetch.failRequest",
                               {"requestId": rid, "errorReason": "BlockedByClient"}, sid)
            elif m == "Page.javascriptDialogOpening":  # alert() from an injected handler
                res.dialogs.append(p.get("message", ""))
                self._send("Page.handleJavaScriptDialog", {"accept": False}, sid)
            elif m == "Page.loadEventFired":
                loaded.append(True)

        for method, params in (("Page.enable", {}), ("Runtime.enable", {}), ("Log.enable", {}),
                               ("Network.enable", {}),
                               ("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}),
                               ("Emulation.setDeviceMetricsOverride",
                                {"width": width, "height": height, "deviceScaleFactor": 1,
                                 "mobile": False})):
            self.call(method, params, sid, on_event)
        nav = self.call("Page.navigate", {"url": url}, sid, on_event)
        if nav.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {nav['errorText']}")
        deadline = time.monotonic() + self.timeout
        while not loaded:
            msg = self._read_one(deadline)
            if "method" in msg:
                on_event(msg)
        if click is not None:
            where = self.call("Runtime.evaluate", {"returnByValue": True, "expression": (
                f"(() => {{ const e = document.querySelector({json.dumps(click)}); if (!e) "
                "return null; e.scrollIntoView({block: 'center'}); const r = "
                "e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2];"
                " })()")}, sid, on_event)["result"].get("value")
            if where is None:
                raise CDPError(f"nothing on the page matches {click!r}")
            loaded.clear()
            for kind in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", {"type": kind, "x": where[0],
                                                       "y": where[1], "button": "left",
                                                       "clickCount": 1}, sid, on_event)
            deadline = time.monotonic() + self.timeout
            while not loaded:
                msg = self._read_one(deadline)
                if "method" in msg:
                    on_event(msg)
        # A round trip after the load event, so late console messages are in.
        value = self.call("Runtime.evaluate", {"expression": probe_js, "returnByValue": True},
                          sid, on_event)
        if "exceptionDetails" in value:
            raise CDPError(f"probe failed: {value['exceptionDetails']}")
        res.probe = value["result"].get("value")
        shot = self.call("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True}, sid, on_event)
        res.png = base64.b64decode(shot["data"])
        self.call("Target.closeTarget", {"targetId": target}, None, on_event)
        return res

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own group: the browser and helpers
            self.proc.wait(timeout=10)
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass


__all__ = ["Browser", "CDPError", "PageResult", "chromium"]
