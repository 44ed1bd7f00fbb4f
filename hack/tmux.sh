#!/usr/bin/env bash
# Makes sure Debian's tmux is installed: the e2e test of `kubectl molt status`
# runs it in a real terminal (a tmux pane) and reads the screen.
exec "$(dirname "$0")/debian-package.sh" tmux tmux
