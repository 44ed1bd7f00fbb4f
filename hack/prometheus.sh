#!/usr/bin/env bash
# Makes sure Debian's prometheus package is installed: `make test` runs the
# rules' unit tests with its promtool, and the dashboard test runs its
# prometheus. Installs it (as root) when missing; otherwise says how.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
	exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
	echo "prometheus.sh: promtool and prometheus are missing and this is not root: run \`sudo apt-get install -y prometheus\` (Debian's package ships both)" >&2
	exit 1
fi
echo "prometheus.sh: installing Debian's prometheus package (for promtool and prometheus)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "prometheus.sh: apt-get update failed: check the machine's Debian sources" >&2; exit 1; }
apt-get install -y -qq --no-install-recommends prometheus >/dev/null || { echo "prometheus.sh: apt-get install prometheus failed" >&2; exit 1; }
command -v promtool >/dev/null 2>&1 || { echo "prometheus.sh: the prometheus package installed no promtool on PATH" >&2; exit 1; }
