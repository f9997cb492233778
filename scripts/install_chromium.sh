#!/usr/bin/env bash
# Debian's chromium for tests/test_report_browser.py (report.html in a headless browser), installed by `make test`
# when missing and possible. Never fails the set-up: without root or apt, or when apt fails, it prints one line and
# the browser test skips with its reason. Costs one `command -v` when chromium is already there.
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" != "0" ]; then
  echo "chromium: not installed, and installing needs root (sudo apt-get install -y chromium); the browser test skips"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium: not installed and no apt-get here; install a chromium for the browser test, which skips meanwhile"
  exit 0
fi
echo "chromium: installing Debian's chromium for the browser test (apt-get install -y chromium)"
if DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
   || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; }; then
  echo "chromium: installed"
else
  echo "chromium: apt-get install -y chromium failed (no network or no such package); the browser test skips"
fi
exit 0
