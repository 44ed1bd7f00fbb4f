#!/usr/bin/env bash
# A Docker engine for `make images`, on a Debian machine without systemd (these
# machines, and CI's fresh one).
#
#   hack/docker.sh install   install docker.io from Debian (as root) unless dockerd is there
#   hack/docker.sh start     start dockerd in the background unless a daemon answers;
#                            its pid goes to $MOLT_DOCKER_DIR/dockerd.pid, its log beside it
#   hack/docker.sh ensure    install, then start
#   hack/docker.sh stop      stop the dockerd that `start` started (by its pid; SIGKILL after 30s)
#   hack/docker.sh status    say whether a daemon answers and whether it is ours
#
# Only a daemon this script started is ever stopped, and only by the pid it
# recorded. The daemon is the machine's (/var/run/docker.sock), so its pid and
# log live in MOLT_DOCKER_DIR, /run/molt-docker by default, not in a checkout.
set -euo pipefail

STATE_DIR="${MOLT_DOCKER_DIR:-/run/molt-docker}"
PID_FILE="${STATE_DIR}/dockerd.pid"
LOG_FILE="${STATE_DIR}/dockerd.log"

log() { echo "docker.sh: $*" >&2; }

# The client that comes with the engine, so client and daemon match (a newer
# client elsewhere on PATH negotiates down, but needs not be there).
docker_cli() {
	if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

answers() { docker_cli info >/dev/null 2>&1; }

ours() {
	[[ -f "${PID_FILE}" ]] || return 1
	local pid
	pid="$(cat "${PID_FILE}")"
	[[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null && [[ "$(cat "/proc/${pid}/comm" 2>/dev/null)" == dockerd ]]
}

install() {
	if command -v dockerd >/dev/null 2>&1; then
		return 0
	fi
	if [[ "$(id -u)" != 0 ]]; then
		log "dockerd is not installed and this is not root: run \`sudo apt-get install -y docker.io\`"
		exit 1
	fi
	log "installing docker.io from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || { log "apt-get update failed (errors above): check the machine's apt sources and network, then run \`hack/docker.sh install\` again"; exit 1; }
	apt-get install -y -qq --no-install-recommends docker.io iptables ca-certificates >/dev/null ||
		{ log "apt-get install docker.io failed (errors above): run \`apt-get install -y docker.io\` to see why"; exit 1; }
	command -v dockerd >/dev/null 2>&1 || { log "apt-get installed docker.io but there is no dockerd on PATH"; exit 1; }
}

start() {
	if answers; then
		ours && log "dockerd already runs (pid $(cat "${PID_FILE}"))" || log "using the Docker daemon that already answers"
		return 0
	fi
	command -v dockerd >/dev/null 2>&1 || { log "no dockerd: run \`hack/docker.sh install\` (as root)"; exit 1; }
	mkdir -p "${STATE_DIR}"
	log "starting dockerd (log ${LOG_FILE})"
	# setsid: dockerd outlives this script and make, in its own session.
	setsid dockerd --pidfile "${STATE_DIR}/dockerd.self.pid" >"${LOG_FILE}" 2>&1 </dev/null &
	echo $! >"${PID_FILE}"
	for _ in $(seq 1 120); do
		if answers; then
			log "dockerd ready (pid $(cat "${PID_FILE}"))"
			return 0
		fi
		if ! kill -0 "$(cat "${PID_FILE}")" 2>/dev/null; then
			log "dockerd exited at start; the end of its log (${LOG_FILE}):"
			tail -20 "${LOG_FILE}" >&2
			log "fix what it names (storage driver, iptables, cgroups), then run \`hack/docker.sh start\`"
			rm -f "${PID_FILE}"
			exit 1
		fi
		sleep 0.5
	done
	log "dockerd (pid $(cat "${PID_FILE}")) does not answer \`docker info\` after 60s; the end of its log (${LOG_FILE}):"
	tail -20 "${LOG_FILE}" >&2
	log "it still runs: \`hack/docker.sh stop\` stops it"
	exit 1
}

stop() {
	if ! ours; then
		log "no dockerd started by this script runs"
		rm -f "${PID_FILE}"
		return 0
	fi
	local pid
	pid="$(cat "${PID_FILE}")"
	kill -TERM "${pid}"
	for _ in $(seq 1 60); do
		kill -0 "${pid}" 2>/dev/null || { rm -f "${PID_FILE}"; log "dockerd (pid ${pid}) stopped"; return 0; }
		sleep 0.5
	done
	log "dockerd (pid ${pid}) still runs 30s after SIGTERM: SIGKILL"
	kill -KILL "${pid}" 2>/dev/null || true
	rm -f "${PID_FILE}"
}

status() {
	if answers; then
		if ours; then echo "dockerd runs (pid $(cat "${PID_FILE}"), started by hack/docker.sh, log ${LOG_FILE})"; else echo "a Docker daemon answers (not started by hack/docker.sh)"; fi
	else
		echo "no Docker daemon answers"
	fi
}

case "${1:-}" in
install) install ;;
start) start ;;
ensure) install && start ;;
stop) stop ;;
status) status ;;
*)
	sed -n '2,12p' "$0" >&2
	exit 1
	;;
esac
