#!/usr/bin/env bash
# Usage: hack/debian-package.sh PACKAGE COMMAND... — makes sure Debian's
# PACKAGE is installed, judged by COMMANDs on PATH. Installs it (as root) when
# one is missing; otherwise says how. prometheus.sh and tmux.sh call it.
set -euo pipefail

pkg=$1
shift
missing=()
for c in "$@"; do
	command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "$(id -u)" != 0 ]]; then
	echo "${pkg}: ${missing[*]} missing and this is not root: run \`sudo apt-get install -y ${pkg}\`" >&2
	exit 1
fi
echo "${pkg}: installing Debian's ${pkg} package (for ${missing[*]})" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "${pkg}: apt-get update failed: check the machine's Debian sources" >&2; exit 1; }
apt-get install -y -qq --no-install-recommends "${pkg}" >/dev/null || { echo "${pkg}: apt-get install ${pkg} failed" >&2; exit 1; }
for c in "$@"; do
	command -v "$c" >/dev/null 2>&1 || { echo "${pkg}: the ${pkg} package installed no ${c} on PATH" >&2; exit 1; }
done
