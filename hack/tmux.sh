#!/usr/bin/env bash
# Makes sure Debian's tmux is installed: the e2e test of `kubectl molt status`
# runs it in a real terminal (a tmux pane) and reads the screen. Installs it
# (as root) when missing; otherwise says how.
set -euo pipefail

if command -v tmux >/dev/null 2>&1; then
	exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
	echo "tmux.sh: tmux is missing and this is not root: run \`sudo apt-get install -y tmux\`" >&2
	exit 1
fi
echo "tmux.sh: installing Debian's tmux package" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "tmux.sh: apt-get update failed: check the machine's Debian sources" >&2; exit 1; }
apt-get install -y -qq --no-install-recommends tmux >/dev/null || { echo "tmux.sh: apt-get install tmux failed" >&2; exit 1; }
command -v tmux >/dev/null 2>&1 || { echo "tmux.sh: the tmux package installed no tmux on PATH" >&2; exit 1; }
