"""A headless Chromium driven over the DevTools protocol (websocket-client, from the dev extra).

Used by the explore page's browser tests and by bench/bench_explore.py. The browser is the
distribution's package (Debian: ``apt-get install -y chromium``); :func:`find_chromium`
returns None when it is missing, and the tests then fail saying how to install it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "headless Chromium is needed for the explore page's browser tests: apt-get install -y chromium (or set TEMPORA_CHROMIUM)"


def find_chromium() -> str | None:
    env = os.environ.get("TEMPORA_CHROMIUM")
    if env:
        return env if Path(env).exists() else shutil.which(env)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_version(executable: str) -> str:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


class Browser:
    """One headless Chromium process; :meth:`page` opens a tab."""

    def __init__(self, executable: str | None = None, width: int = 1440, height: int = 1100):
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise RuntimeError(INSTALL_HINT)
        self.profile = tempfile.mkdtemp(prefix="tempora-chromium-")
        args = [
            self.executable,
            "--headless=new",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root (CI containers)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = self._port()

    def _port(self) -> int:
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        self.close()
        raise RuntimeError("Chromium did not start: " + "".join(seen[-5:]).strip())

    def page(self) -> "Page":
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as resp:
            info = json.loads(resp.read())
        return Page(info["webSocketDebuggerUrl"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """A tab: commands, the console errors it reported, evaluation and screenshots."""

    def __init__(self, ws_url: str):
        import websocket  # websocket-client

        self.ws = websocket.create_connection(ws_url, timeout=120, suppress_origin=True)
        self._id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params) -> dict:
        self._id += 1
        me = self._id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def pump(self, seconds: float = 0.0) -> None:
        """Collect the events that arrive within ``seconds``."""
        self.ws.settimeout(0.05)
        end = time.monotonic() + seconds
        try:
            while True:
                try:
                    msg = json.loads(self.ws.recv())
                except Exception:  # noqa: BLE001 - a timeout: nothing more yet
                    if time.monotonic() >= end:
                        break
                    continue
                if "method" in msg:
                    self.events.append(msg)
        finally:
            self.ws.settimeout(120)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        out = []
        for ev in self.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        return out

    def requests(self) -> list[str]:
        """URLs of every request the page made so far."""
        return [ev["params"]["request"]["url"] for ev in self.events if ev["method"] == "Network.requestWillBeSent"]

    def evaluate(self, expression: str, await_promise: bool = True):
        res = self.send("Runtime.evaluate", expression=expression, awaitPromise=await_promise, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page error: {res['exceptionDetails'].get('exception', {}).get('description') or res['exceptionDetails']}")
        return res.get("result", {}).get("value")

    def open(self, url: str, ready: str = "window.tempora && window.tempora.ready", timeout: float = 60.0) -> float:
        """Navigate to ``url`` and wait until ``ready`` is true; returns the seconds it took."""
        t0 = time.perf_counter()
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"!!({ready})"):
                return time.perf_counter() - t0
            if self.evaluate("!!(window.tempora && window.tempora.error)"):
                raise RuntimeError(f"page failed: {self.evaluate('window.tempora.error')}; {self.errors()}")
            time.sleep(0.05)
        raise TimeoutError(f"{url} not ready after {timeout:g} s; console: {self.errors()}")

    def screenshot(self, path: str | Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.ws.close()
