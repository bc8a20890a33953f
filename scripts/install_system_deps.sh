#!/bin/sh
# Install the system packages the test suite needs (today: Chromium for tests/browser).
# Idempotent: does nothing when Chromium is already there. Never runs `playwright install`
# (that would download a separate browser); the tests drive Debian's chromium through Playwright.
#
#   CHROMIUM_PATH=/path/to/chromium   use that browser instead of /usr/bin/chromium
#   NBAGENT_SKIP_BROWSER=1            browser tests are skipped, so nothing is installed
set -eu

say() { printf '[install_system_deps] %s\n' "$*"; }

case "${NBAGENT_SKIP_BROWSER:-}" in
    ""|0) ;;
    *) say "NBAGENT_SKIP_BROWSER=${NBAGENT_SKIP_BROWSER}: browser tests are skipped, not installing Chromium"; exit 0 ;;
esac

CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    say "Chromium found: $CHROMIUM"
    exit 0
fi

if [ -n "${CHROMIUM_PATH:-}" ]; then
    say "CHROMIUM_PATH=$CHROMIUM_PATH is not an executable file; fix it, or unset it to use (and install)"
    say "/usr/bin/chromium. Not installing anything; tests/browser will fail until this is fixed."
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    say "Chromium is missing ($CHROMIUM) and we are not root, so it cannot be installed here."
    say "Install it with:  sudo apt-get install -y chromium   (or set CHROMIUM_PATH=/path/to/chromium),"
    say "or skip the browser tests with NBAGENT_SKIP_BROWSER=1. Without either, tests/browser will fail."
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    say "Chromium is missing ($CHROMIUM) and apt-get is not available on this system."
    say "Install Chromium with your package manager and set CHROMIUM_PATH, or set NBAGENT_SKIP_BROWSER=1."
    exit 0
fi

say "Chromium is missing: running 'apt-get update -qq && apt-get install -y -qq chromium'"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium
if [ -x /usr/bin/chromium ]; then
    say "installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
else
    say "apt-get finished but /usr/bin/chromium is still missing"
    exit 1
fi
