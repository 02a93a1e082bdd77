"""Open a page in Debian's headless Chromium over the DevTools protocol (a pipe, no port).

Collects what a reviewer's browser would complain about: console errors,
uncaught exceptions, log entries of level error (a blocked load, a CSP
violation) and every network request the page made, then takes a
full-page screenshot. `--remote-debugging-pipe` speaks NUL-separated JSON
on file descriptors 3 (commands in) and 4 (events out), so nothing listens
on the network and no other process can attach.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags as the machine notes advise for a closed network (no background traffic).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--hide-scrollbars", "about:blank"]


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    evaluated: Any = None


class Browser:
    """One headless Chromium with one page, driven over the pipe."""

    def __init__(self, timeout: float = 60.0) -> None:
        self._timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="assay-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._evt_r, evt_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends on fds 3 and 4
            # dup first: a pipe end may already be fd 3 or 4 (dup2 onto itself
            # would keep its close-on-exec flag, or overwrite the other end).
            read_end, write_end = os.dup(cmd_r), os.dup(evt_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self._proc = subprocess.Popen([CHROMIUM, f"--user-data-dir={self._profile}", *FLAGS],
                                      preexec_fn=wire, close_fds=False, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(evt_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session = ""

    def close(self) -> None:
        try:
            self._send("Browser.close", session=False)
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, TimeoutError):
            self._proc.kill()
            self._proc.wait()
        for fd in (self._cmd_w, self._evt_r):
            os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._evt_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._evt_r, 1 << 20)
            if not chunk:
                raise OSError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _wait_for(self, method: str) -> None:
        deadline = time.monotonic() + self._timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read_message(deadline))

    def open(self, url: str, expression: str | None = None, width: int = 1200) -> PageReport:
        """Load `url`, let it settle, evaluate `expression`, and screenshot the whole page."""
        target = self._send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self._send("Target.attachToTarget", {"targetId": target["targetId"],
                                                            "flatten": True}, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self._send(f"{domain}.enable")
        self._send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        self.events.clear()
        self._send("Page.navigate", {"url": url})
        self._wait_for("Page.loadEventFired")
        report = PageReport()
        if expression is not None:
            result = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
            report.evaluated = result.get("result", {}).get("value")
        metrics = self._send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self._send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": metrics["height"], "scale": 1}})
        report.screenshot = base64.b64decode(shot["data"])
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                report.console_errors.append(" ".join(str(a.get("value", a.get("description")))
                                                      for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                report.console_errors.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                report.console_errors.append(params["entry"]["text"])
            elif method == "Network.requestWillBeSent":
                report.requests.append(params["request"]["url"])
        return report


def render(path: Path, expression: str | None = None) -> PageReport:
    """Open a local HTML file in a fresh headless Chromium."""
    browser = Browser()
    try:
        return browser.open(path.resolve().as_uri(), expression)
    finally:
        browser.close()
