#!/usr/bin/env bash
# What the test suite needs beyond its Python environment, provisioned on a fresh machine:
# headless Chromium, for the explore page's browser tests (tests/sim/test_explore_browser.py,
# never skipped). Found already (under a name tests/helpers/headless.py looks for, or
# TEMPORA_CHROMIUM): nothing to do. Otherwise it is installed from the distribution's packages
# (apt-get) when this user may (root, or sudo without a password); where that cannot be done,
# one line on stderr names the command to run, and the exit status is 2.
# Called by `make test` and .ci/run; `make test-fast` needs nothing from here.
set -euo pipefail

chromium_found() {
    if [ -n "${TEMPORA_CHROMIUM:-}" ]; then
        [ -x "$TEMPORA_CHROMIUM" ] || command -v "$TEMPORA_CHROMIUM" >/dev/null 2>&1
        return
    fi
    local name
    for name in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$name" >/dev/null 2>&1 && return 0
    done
    return 1
}

refuse() {
    echo "make test: headless Chromium is missing for the browser tests: $1 (or set TEMPORA_CHROMIUM=PATH; make test-fast needs none)" >&2
    exit 2
}

chromium_found && exit 0
command -v apt-get >/dev/null 2>&1 || refuse "install your distribution's chromium package"

if [ "$(id -u)" = 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    refuse "run 'sudo apt-get install -y chromium'"
fi

echo "installing headless Chromium for the browser tests: apt-get install chromium" >&2
if ! { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
    refuse "'apt-get install -y chromium' failed; run it by hand"
fi
chromium_found || refuse "the chromium package installed no chromium command"
