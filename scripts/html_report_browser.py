#!/usr/bin/env python3
"""The HTML reports (`kreplay compare --html`, `kreplay play DIR --html`) in a real browser.

`check`: builds both reports with the debug binary from the fixtures (testdata/runs, and
testdata/captures replayed: without a GPU every capture is an `error`, which still makes a
whole report), opens each in headless Chromium (Debian's `chromium`), and fails when a
screenshot is blank, when the page logged anything to the console (the reports have no script,
so any console line is a failure: a script or a resource that should not be there), or when the
DOM lacks the table rows or the chart, or refers to anything outside the file. Two controls
prove the checks can fail: a blank page must be judged blank and a page with a script error
must be caught. Without Chromium it installs it with apt-get where it can (root, apt); where it
cannot, it prints why and skips, unless KREPLAY_REQUIRE_CHROMIUM=1, then it fails.

`pictures BASE.jsonl NEW.jsonl OUTDIR [PLAY_REPORT.html]`: the README's screenshots from real
runs: OUTDIR/compare-report.png (and .html), and OUTDIR/play-report.png of a report that
`kreplay play DIR --html` wrote.
"""

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = (1400, 2000)


class Skip(Exception):
    """No browser to be had here: the reason."""


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium():
    """Debian's chromium through apt-get when this is root with apt; else why not."""
    if os.geteuid() != 0:
        raise Skip("chromium is not installed and this is not root (apt-get install chromium)")
    if not shutil.which("apt-get"):
        raise Skip("chromium is not installed and there is no apt-get here")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("html-report-check: installing chromium with apt-get", flush=True)
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=900)
        if done.returncode != 0:
            raise Skip(f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}")
    path = find_chromium()
    if not path:
        raise Skip("apt-get installed chromium but no chromium command was found")
    return path


def chromium_args(chromium):
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0"]


def screenshot(chromium, page, png, window=WINDOW):
    """Renders `page` into `png`; the console lines it logged."""
    cmd = chromium_args(chromium) + [f"--screenshot={png}", f"--window-size={window[0]},{window[1]}",
                                     "file://" + os.path.abspath(page)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=180)
    if done.returncode != 0 or not os.path.exists(png):
        raise RuntimeError(f"chromium could not render {page} (exit {done.returncode}): "
                           f"{done.stderr.strip()[-600:]}")
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def dump_dom(chromium, page):
    cmd = chromium_args(chromium) + ["--dump-dom", "file://" + os.path.abspath(page)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"chromium could not load {page} (exit {done.returncode})")
    return done.stdout


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def unfilter(kind, raw, prev, bpp):
    """One scan line of a PNG with its filter undone (PNG spec, section 9)."""
    if kind == 0:
        return bytearray(raw)
    if kind == 2:
        return bytearray((x + p) & 255 for x, p in zip(raw, prev))
    row = bytearray(raw)
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + left) & 255
        elif kind == 3:
            row[i] = (row[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            up_left = prev[i - bpp] if i >= bpp else 0
            row[i] = (row[i] + paeth(left, prev[i], up_left)) & 255
        else:
            raise ValueError(f"PNG filter {kind} is not one of 0-4")
    return row


def read_png(path):
    """(width, height, rows of RGB(A) bytes, bytes per pixel) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour = header[:4]
    if depth != 8 or colour not in (2, 6):
        raise ValueError(f"{path}: PNG of bit depth {depth}, colour type {colour}: expected 8-bit RGB(A)")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        prev = unfilter(raw[start], raw[start + 1:start + 1 + stride], prev, bpp)
        rows.append(prev)
    return width, height, rows, bpp


def ink(path):
    """(fraction of pixels that are not near-white, distinct colours at 4 bits a channel)."""
    width, height, rows, bpp = read_png(path)
    inked, colours = 0, set()
    for row in rows:
        for x in range(0, width * bpp, bpp):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if r < 235 or g < 235 or b < 235:
                inked += 1
            colours.add((r >> 4, g >> 4, b >> 4))
    return inked / (width * height), len(colours)


def looks_drawn(path):
    inked, colours = ink(path)
    return inked > 0.02 and colours >= 12, inked, colours


def self_contained(dom):
    """What in the DOM refers outside the file (nothing, for a report)."""
    return re.findall(r"(?:src|href)\s*=|url\(|https?://|<script|<link", dom)


def build_reports(out):
    binary = os.environ.get("KREPLAY_BIN") or os.path.join(ROOT, "target", "debug", "kreplay")
    if not os.path.exists(binary):
        subprocess.run(["cargo", "build", "-q", "-p", "kreplay"], cwd=ROOT, check=True)
    compare = os.path.join(out, "compare.html")
    runs = os.path.join(ROOT, "testdata", "runs")
    done = subprocess.run([binary, "compare", os.path.join(runs, "corpus-base.jsonl"),
                           os.path.join(runs, "corpus-new.jsonl"), "--html", compare],
                          cwd=ROOT, stdout=subprocess.DEVNULL)
    if done.returncode != 1:
        raise RuntimeError(f"kreplay compare of the fixtures exited {done.returncode}: expected 1 (they regress)")
    play = os.path.join(out, "play.html")
    done = subprocess.run([binary, "play", os.path.join(ROOT, "testdata", "captures"), "--no-timing",
                           "--timeout", "120", "--quiet", "--html", play], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if done.returncode not in (0, 1, 2) or not os.path.exists(play):
        raise RuntimeError(f"kreplay play testdata/captures --html exited {done.returncode} without a report")
    captures = len([f for f in os.listdir(os.path.join(ROOT, "testdata", "captures")) if f.endswith(".krr")])
    # (page, the id of its table of captures, its rows, how many chart points at least: the
    # 30 pairs are all timed; replays without a GPU have no time to plot).
    return [(compare, "pairs", 30, 30), (play, "captures", captures, 0)]


def table_rows(dom, table_id):
    """The body rows (with a class) of the table of that id."""
    start = dom.find(f'<table id="{table_id}">')
    if start < 0:
        return 0
    table = dom[start:dom.find("</table>", start)]
    return len(re.findall(r'<tr class="', table))


def check_page(chromium, page, table_id, rows, points):
    failures = []
    png = page[:-len(".html")] + ".png"
    console = screenshot(chromium, page, png)
    failures += [f"console: {line}" for line in console]
    drawn, inked, colours = looks_drawn(png)
    print(f"  {os.path.basename(png)}: {inked:.1%} of pixels inked, {colours} distinct colours")
    if not drawn:
        failures.append(f"{png} looks blank ({inked:.1%} inked, {colours} colours)")
    dom = dump_dom(chromium, page)
    found = table_rows(dom, table_id)
    print(f"  DOM: {found} rows in table #{table_id}, {dom.count('<svg')} <svg>, {dom.count('<circle')} <circle>")
    if found != rows:
        failures.append(f"the DOM's table #{table_id} has {found} rows where {rows} were expected")
    if dom.count("<svg") != 1:
        failures.append(f"the DOM has {dom.count('<svg')} charts where 1 was expected")
    # Each legend entry of a series is a circle too, so points + legend >= points.
    if dom.count("<circle") < points:
        failures.append(f"the chart has {dom.count('<circle')} points where {points} were expected")
    failures += [f"refers outside the file: {ref}" for ref in self_contained(dom)]
    return failures


def controls(chromium, out):
    """The checks must be able to fail: a blank page is blank, a script error is caught."""
    blank = os.path.join(out, "blank.html")
    with open(blank, "w") as f:
        f.write("<!DOCTYPE html><html><body></body></html>")
    screenshot(chromium, blank, os.path.join(out, "blank.png"), (400, 300))
    if looks_drawn(os.path.join(out, "blank.png"))[0]:
        return ["control: a blank page was not judged blank"]
    broken = os.path.join(out, "broken.html")
    with open(broken, "w") as f:
        f.write("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom'); nope();</script></body></html>")
    if not screenshot(chromium, broken, os.path.join(out, "broken.png"), (400, 300)):
        return ["control: a page with a script error logged nothing to the console"]
    return []


def browser():
    chromium = find_chromium()
    return chromium if chromium else install_chromium()


def check():
    try:
        chromium = browser()
    except Skip as why:
        if os.environ.get("KREPLAY_REQUIRE_CHROMIUM") == "1":
            print(f"html-report-check: FAILED: {why} (KREPLAY_REQUIRE_CHROMIUM=1)")
            return 1
        print(f"html-report-check: skipped: {why}")
        return 0
    out = os.environ.get("KREPLAY_HTML_CHECK_DIR") or tempfile.mkdtemp(prefix="kreplay-html-")
    os.makedirs(out, exist_ok=True)
    failures = controls(chromium, out)
    for page, table_id, rows, points in build_reports(out):
        print(f"html-report-check: {page}")
        failures += check_page(chromium, page, table_id, rows, points)
    for f in failures:
        print(f"html-report-check: FAILED: {f}")
    if failures:
        return 1
    print(f"html-report-check: 2 reports render in {chromium}: ok (screenshots in {out})")
    return 0


def pictures(base, new, outdir, play_report=None):
    chromium = browser()
    os.makedirs(outdir, exist_ok=True)
    binary = os.environ.get("KREPLAY_BIN") or os.path.join(ROOT, "target", "debug", "kreplay")
    page = os.path.join(outdir, "compare-report.html")
    done = subprocess.run([binary, "compare", base, new, "--html", page], stdout=subprocess.DEVNULL)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"kreplay compare exited {done.returncode}")
    shots = [(page, os.path.join(outdir, "compare-report.png"))]
    if play_report:
        shots.append((play_report, os.path.join(outdir, "play-report.png")))
    for page, png in shots:
        console = screenshot(chromium, page, png, (1400, 1500))
        for line in console:
            print(f"report-pictures: console: {line}")
        print(f"report-pictures: {png}")
    return 0


def main(argv):
    if argv[:1] == ["check"] and len(argv) == 1:
        return check()
    if argv[:1] == ["pictures"] and len(argv) in (4, 5):
        return pictures(*argv[1:])
    print(__doc__)
    print("usage: html_report_browser.py check | pictures BASE.jsonl NEW.jsonl OUTDIR [PLAY_REPORT.html]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
