#!/usr/bin/env bash
# The README's pictures of the HTML reports, from real runs:
#   scripts/report-pictures.sh BASE.jsonl NEW.jsonl OUTDIR [PLAY_REPORT.html]
# writes OUTDIR/compare-report.html and OUTDIR/compare-report.png (`kreplay compare BASE NEW
# --html`), and OUTDIR/play-report.png of PLAY_REPORT.html when given (a report that
# `kreplay play DIR --html PLAY_REPORT.html` wrote on a GPU machine). Copy them into docs/.
# KREPLAY_BIN picks the kreplay binary (default target/debug/kreplay).
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 BASE.jsonl NEW.jsonl OUTDIR [PLAY_REPORT.html]" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
export KREPLAY_BIN="${KREPLAY_BIN:-$root/target/debug/kreplay}"
exec python3 "$root/scripts/html_report_browser.py" pictures "$@"
