#!/usr/bin/env bash
# Makes sure Debian's prometheus package is installed: `make test` runs the
# rules' unit tests with its promtool, and the dashboard test runs its
# prometheus.
exec "$(dirname "$0")/debian-package.sh" prometheus promtool prometheus
