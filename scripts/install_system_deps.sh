#!/bin/sh
# Install the system packages the test suite needs: Chromium (tests/browser) and PostgreSQL with
# PgBouncer (the PostgresStore tests start a private cluster and a PgBouncer of their own).
# Idempotent: installs only what is missing. Never runs `playwright install` (that would
# download a separate browser); the tests drive Debian's chromium through Playwright.
#
#   CHROMIUM_PATH=/path/to/chromium   use that browser instead of /usr/bin/chromium
#   NBAGENT_SKIP_BROWSER=1            browser tests are skipped, so Chromium is not installed
#   NBAGENT_SKIP_POSTGRES=1           PostgreSQL tests are skipped, so PostgreSQL is not installed
set -eu

say() { printf '[install_system_deps] %s\n' "$*"; }

APT_UPDATED=""
# apt_install PACKAGE...: install with apt-get as root; explain and return 1 when that cannot be done.
apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        say "not root, so '$*' cannot be installed here: run  sudo apt-get install -y $*"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "apt-get is not available on this system: install '$*' with your package manager"
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$APT_UPDATED" ]; then
        say "running 'apt-get update -qq'"
        apt-get update -qq
        APT_UPDATED=1
    fi
    say "running 'apt-get install -y -qq $*'"
    apt-get install -y -qq "$@"
}

# ------------------------------------------------------------------------------------ Chromium
install_chromium() {
    case "${NBAGENT_SKIP_BROWSER:-}" in
        ""|0) ;;
        *) say "NBAGENT_SKIP_BROWSER=${NBAGENT_SKIP_BROWSER}: browser tests are skipped, not installing Chromium"; return 0 ;;
    esac
    CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
    if [ -x "$CHROMIUM" ]; then
        say "Chromium found: $CHROMIUM"
        return 0
    fi
    if [ -n "${CHROMIUM_PATH:-}" ]; then
        say "CHROMIUM_PATH=$CHROMIUM_PATH is not an executable file; fix it, or unset it to use (and install)"
        say "/usr/bin/chromium. Not installing anything; tests/browser will fail until this is fixed."
        return 0
    fi
    say "Chromium is missing ($CHROMIUM)"
    if ! apt_install chromium; then
        say "install Chromium (or set CHROMIUM_PATH=/path/to/chromium), or skip the browser tests with"
        say "NBAGENT_SKIP_BROWSER=1. Without either, tests/browser will fail."
        return 0
    fi
    if [ -x /usr/bin/chromium ]; then
        say "installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    else
        say "apt-get finished but /usr/bin/chromium is still missing"
        exit 1
    fi
}

# ------------------------------------------------------------------------------------ PostgreSQL
postgres_bin() {
    # The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl.
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

install_postgres() {
    case "${NBAGENT_SKIP_POSTGRES:-}" in
        ""|0) ;;
        *) say "NBAGENT_SKIP_POSTGRES=${NBAGENT_SKIP_POSTGRES}: PostgreSQL tests are skipped, not installing PostgreSQL"; return 0 ;;
    esac
    missing=""
    postgres_bin >/dev/null || missing="postgresql"
    command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$missing pgbouncer"
    # openssl makes the self-signed certificate of the TLS test's cluster.
    command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
    if [ -z "$missing" ]; then
        say "PostgreSQL found: $(postgres_bin); PgBouncer and openssl found"
        return 0
    fi
    say "missing:$missing (the PostgresStore tests run a private cluster and PgBouncer)"
    if [ ! -e /etc/postgresql-common/createcluster.conf ] && [ "$(id -u)" -eq 0 ]; then
        # The tests start clusters of their own: no system cluster on port 5432 is needed.
        mkdir -p /etc/postgresql-common
        echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
    fi
    # shellcheck disable=SC2086  # word splitting of the package list is meant
    if ! apt_install $missing; then
        say "or skip the PostgreSQL tests with NBAGENT_SKIP_POSTGRES=1. Without either, they will fail."
        return 0
    fi
    if postgres_bin >/dev/null; then
        say "installed: PostgreSQL in $(postgres_bin)"
    else
        say "apt-get finished but no /usr/lib/postgresql/<version>/bin/initdb was found"
        exit 1
    fi
}

install_chromium
install_postgres
