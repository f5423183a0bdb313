#!/usr/bin/env bash
# The HTML reports of `kreplay compare --html` and `kreplay play DIR --html`, rendered in
# headless Chromium (installed with apt-get where it can be): fails on a blank screenshot, a
# console message, missing table rows or chart, or a reference outside the file; skips with
# the reason when no Chromium can be had, unless KREPLAY_REQUIRE_CHROMIUM=1.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/html_report_browser.py check
