"""Headless Chromium for screenshots of the Airflow UI, driven through chromedriver's W3C WebDriver
HTTP API with httpx (Debian's `chromium` and `chromium-driver`, installed by scripts/setup.sh; no
Python package beyond httpx, which Airflow already brings)."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port, wait_for

CHROMIUM = "/usr/bin/chromium"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


class Browser:
    """One headless Chromium window, `width` x `height` CSS pixels to start with."""

    def __init__(self, workdir: Path, width: int = 1400, height: int = 1000) -> None:
        port = free_port()
        self._log = open(workdir / "chromedriver.log", "wb")  # noqa: SIM115 - closed in quit()
        self._driver = subprocess.Popen(
            ["chromedriver", f"--port={port}"], stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        wait_for(self._ready, 30, interval=0.1, what="chromedriver")
        options = {
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                "--no-sandbox",  # tests run as root
                "--disable-dev-shm-usage",
                f"--window-size={width},{height}",
                f"--user-data-dir={workdir / 'chromium-profile'}",
            ],
        }
        capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
        session = self._call("POST", "/session", {"capabilities": capabilities})
        self._session = f"/session/{session['sessionId']}"

    def _ready(self) -> bool:
        try:
            return self._http.get("/status").json()["value"]["ready"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body if method == "POST" else None)
        value = response.json()["value"]
        if response.status_code != 200:
            raise RuntimeError(f"WebDriver {method} {path}: {value.get('error')}: {value.get('message')}")
        return value

    def _do(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"{self._session}{path}", body)

    def resize(self, width: int, height: int) -> None:
        """The window's outer size (the page gets a little less height: headless has no toolbar, but a frame)."""
        self._do("POST", "/window/rect", {"width": width, "height": height})

    def get(self, url: str) -> None:
        self._do("POST", "/url", {"url": url})

    def add_cookie(self, name: str, value: str) -> None:
        """A cookie for the current page's host (open a page of the host first)."""
        self._do("POST", "/cookie", {"cookie": {"name": name, "value": value, "path": "/"}})

    def elements(self, xpath: str) -> list[str]:
        """The elements matching `xpath` now."""
        return [e[ELEMENT] for e in self._do("POST", "/elements", {"using": "xpath", "value": xpath})]

    def find(self, xpath: str, timeout: float = 60) -> str:
        """The first element matching `xpath`, waiting for it to appear."""
        return wait_for(lambda: next(iter(self.elements(xpath)), None), timeout, 0.3, f"an element {xpath}")

    def click(self, xpath: str, timeout: float = 60) -> None:
        self._do("POST", f"/element/{self.find(xpath, timeout)}/click", {})

    def text(self) -> str:
        return self._do("POST", "/execute/sync", {"script": "return document.body.innerText", "args": []})

    def wait_text(self, *texts: str, timeout: float = 60) -> None:
        wait_for(lambda: all(t in self.text() for t in texts), timeout, interval=0.3, what=f"text {texts}")

    def screenshot(self, path: Path, settle_s: float = 1.0) -> None:
        time.sleep(settle_s)  # let transitions and late renders finish
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._do("GET", "/screenshot")))

    def quit(self) -> None:
        with contextlib.suppress(Exception):
            self._http.delete(self._session)
        self._http.close()
        self._driver.terminate()
        try:
            self._driver.wait(10)
        except subprocess.TimeoutExpired:
            self._driver.kill()
            self._driver.wait()
        self._log.close()
