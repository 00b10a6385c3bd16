"""The built site as a reader's browser shows it: every page opened in headless Chromium.

``python -m mathagent site --browser-check`` starts Chromium headless, opens each page of a
built site from the disk, waits for it to load, and asks the page itself: does every image
load (complete, with a width), is there text to read, does a notebook output hold a Python
traceback. It saves a full-page PNG screenshot of each page. A problem is one line naming the
page and the element; :mod:`mathagent.site`'s build runs the same checks on the HTML source.

No browser library is needed: the browser is driven through the Chrome DevTools Protocol,
JSON messages over a websocket (``websocket-client``, already in the locked set). The browser
is Debian's ``chromium`` (``bash scripts/install.sh --browser`` installs it), or the one
``MATHAGENT_CHROMIUM`` names.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from mathagent.reaper import stop_process_group
from mathagent.site import MIN_TEXT_CHARS

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: Seconds to wait for the browser to start, and for one page to load.
START_TIMEOUT = 60.0
PAGE_TIMEOUT = 60.0
#: The window the pages are laid out in; the screenshot then grows to the page's full height,
#: cut at MAX_SHOT_HEIGHT pixels (a README can be tens of thousands of pixels long).
WIDTH, HEIGHT = 1280, 900
MAX_SHOT_HEIGHT = 16000


class BrowserError(RuntimeError):
    """No browser, or one that did not start or answer; the message is one line."""


@dataclass
class PageCheck:
    """What the browser found on one page: its problems (none: ok) and its screenshot."""

    name: str
    problems: list[str] = field(default_factory=list)
    images: int = 0
    chars: int = 0
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        if self.problems:
            return [f"{self.name}: {p}" for p in self.problems]
        return [f"{self.name}: ok ({self.images} images, {self.chars} characters)"]


# What the page reports about itself. An error output and a stream written to stderr (a
# progress bar, a warning) get the same markup from nbconvert's lab template
# (data-mime-type="application/vnd.jupyter.stderr"), so an error output is told apart by its
# text: a traceback header, or a last line naming the exception ("ZeroDivisionError: ...").
_INSPECT = r"""(() => {
  const text = el => (el ? el.innerText : '').replace(/\s+/g, ' ').trim();
  const cells = [...document.querySelectorAll('.jp-Cell')];
  const errors = [];
  for (const out of document.querySelectorAll(
      '[data-mime-type="application/vnd.jupyter.stderr"]')) {
    const lines = out.innerText.split('\n').map(l => l.trim()).filter(l => l);
    const last = lines.length ? lines[lines.length - 1] : '';
    if (lines.some(l => l.includes('Traceback (most recent call last)'))
        || /^[A-Za-z_][\w.]*(Error|Exception)\b/.test(last)) {
      errors.push({cell: cells.indexOf(out.closest('.jp-Cell')), last: last.slice(0, 200)});
    }
  }
  return {
    images: document.images.length,
    broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
                                .map(i => i.getAttribute('src') || ''),
    chars: text(document.body).length - text(document.querySelector('nav')).length,
    errors: errors,
  };
})()"""


def find_chromium() -> str:
    """The browser to run: ``MATHAGENT_CHROMIUM``, else the first of :data:`BROWSERS` on PATH."""
    named = os.environ.get("MATHAGENT_CHROMIUM")
    if named:
        found = shutil.which(named)
        if not found:
            raise BrowserError(f"MATHAGENT_CHROMIUM={named}: no such program")
        return found
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserError(f"no Chromium to check the pages with (looked for {', '.join(BROWSERS)} "
                       "on PATH): run `bash scripts/install.sh --browser`, or set "
                       "MATHAGENT_CHROMIUM to a Chromium or Chrome program")


class _DevTools:
    """A DevTools Protocol connection: ``call`` sends a command and returns its result."""

    def __init__(self, url: str, pid: int):
        import websocket

        self.pid = pid  # the browser's process, for a caller that wants to see it stopped

        # suppress_origin: the browser refuses a websocket that names an origin it was not
        # told to allow (--remote-allow-origins), and this client is no web page.
        try:
            self.ws = websocket.create_connection(url, timeout=START_TIMEOUT,
                                                  suppress_origin=True)
        except (websocket.WebSocketException, OSError) as exc:
            raise BrowserError(f"could not connect to the browser at {url} "
                               f"({type(exc).__name__}: {exc})") from None
        self.last_id = 0
        self.events: list[dict] = []

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            try:
                reply = self._receive(deadline)
            except TimeoutError:
                raise BrowserError(f"the browser did not answer {method} within "
                                   f"{PAGE_TIMEOUT:.0f} s") from None
            if reply.get("id") == self.last_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str, session: str, timeout: float) -> None:
        """Until ``event`` arrives for ``session``; :class:`TimeoutError` after ``timeout``."""
        deadline = time.monotonic() + timeout
        pending, self.events = self.events, []
        while not any(e.get("method") == event and e.get("sessionId") == session
                      for e in pending):
            pending = [self._receive(deadline)]

    def _receive(self, deadline: float) -> dict:
        import websocket

        self.ws.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            return json.loads(self.ws.recv())
        except (websocket.WebSocketTimeoutException, TimeoutError):
            raise TimeoutError from None
        except (websocket.WebSocketException, OSError) as exc:
            raise BrowserError(f"the browser stopped answering ({type(exc).__name__})") from exc

    def close(self) -> None:
        self.ws.close()


@contextmanager
def running_browser(program: str | None = None) -> Iterator[_DevTools]:
    """Start headless Chromium with a fresh profile; yield a DevTools connection to it. The
    browser, and only the processes it started, are stopped on the way out, whatever happens."""
    program = program or find_chromium()
    with tempfile.TemporaryDirectory(prefix="mathagent-chromium-") as profile:
        command = [
            program, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            # Chromium's sandbox refuses to run as root, which is how CI and containers run it;
            # the pages it opens are the site just built from the disk, not the web.
            "--no-sandbox",
            # Offline and the same everywhere: no host name resolves, so nothing is fetched
            # from the network (the site's own images are files or embedded; MathJax, loaded
            # from a CDN, then leaves formulas as their LaTeX source).
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions",
            # shared memory in /tmp: a container's small /dev/shm crashes tabs as tall as a
            # full-page screenshot
            "--disable-dev-shm-usage", "about:blank",
        ]
        # A session of its own, so that the browser's helper processes can be stopped with it
        # (the group holds only what this call started).
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        devtools = None
        try:
            devtools = _DevTools(_devtools_url(Path(profile), proc, program), proc.pid)
            yield devtools
        finally:
            if devtools is not None:
                devtools.close()
            stop_process_group(proc)


def _devtools_url(profile: Path, proc: subprocess.Popen, program: str) -> str:
    """The browser's websocket address, from the DevToolsActivePort file it writes on start."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrowserError(f"{program} exited with status {proc.returncode} on start")
        lines = active.read_text().split() if active.is_file() else []
        if len(lines) == 2:  # the port, then the browser's path
            return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        time.sleep(0.1)
    raise BrowserError(f"{program} did not start within {START_TIMEOUT:.0f} s")


# -- one page --------------------------------------------------------------------------------
def check_page(devtools: _DevTools, page: Path, screenshot: Path | None = None) -> PageCheck:
    """Open ``page`` in a new tab, check it, save its screenshot to ``screenshot``."""
    result = PageCheck(page.name)
    target = devtools.call("Target.createTarget", url="about:blank")["targetId"]
    session = devtools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    try:
        devtools.call("Page.enable", session)
        loaded = devtools.call("Page.navigate", session, url=page.resolve().as_uri())
        if loaded.get("errorText"):
            result.problems.append(f"does not load ({loaded['errorText']})")
            return result
        try:
            devtools.wait_for("Page.loadEventFired", session, PAGE_TIMEOUT)
        except TimeoutError:
            result.problems.append(f"did not finish loading within {PAGE_TIMEOUT:.0f} s")
            return result
        evaluated = devtools.call("Runtime.evaluate", session, expression=_INSPECT,
                                  returnByValue=True)
        if "exceptionDetails" in evaluated or "value" not in evaluated.get("result", {}):
            details = evaluated.get("exceptionDetails", {})
            result.problems.append("the page's check script failed in the browser "
                                   f"({details.get('text', 'no value returned')})")
            return result
        found = evaluated["result"]["value"]
        result.images, result.chars = found["images"], found["chars"]
        for src in found["broken"]:
            shown = src if len(src) <= 60 else src[:57] + "..."
            result.problems.append(f"broken image {shown!r} (it does not load in the browser)")
        for err in found["errors"]:
            result.problems.append(f"error output in cell {err['cell']} ({err['last']})")
        if result.chars < MIN_TEXT_CHARS:
            result.problems.append(f"empty page ({result.chars} visible characters)")
        if screenshot is not None:
            result.screenshot = _screenshot(devtools, session, screenshot)
    finally:
        with suppress(BrowserError):  # an error on the way here is the one to report
            devtools.call("Target.closeTarget", targetId=target)
    return result


def _screenshot(devtools: _DevTools, session: str, path: Path) -> Path:
    size = devtools.call("Page.getLayoutMetrics", session)["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": WIDTH, "scale": 1,
            "height": min(max(size["height"], HEIGHT), MAX_SHOT_HEIGHT)}
    shot = devtools.call("Page.captureScreenshot", session, format="png", clip=clip,
                         captureBeyondViewport=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


# -- a site ----------------------------------------------------------------------------------
def check_site(site_dir: str | Path, screenshots: str | Path | None = None,
               program: str | None = None) -> list[PageCheck]:
    """Check every page of a built site (``index.html`` first) in one headless browser; save
    a screenshot per page (``<page>.png``) into ``screenshots`` when given."""
    site_dir = Path(site_dir)
    pages = sorted(site_dir.glob("*.html"), key=lambda p: (p.name != "index.html", p.name))
    if not pages:
        raise BrowserError(f"{site_dir}: no built site (no .html pages); build it with "
                           "`python -m mathagent site`")
    shots = Path(screenshots) if screenshots else None
    with running_browser(program) as devtools:
        return [check_page(devtools, page, shots / f"{page.stem}.png" if shots else None)
                for page in pages]
