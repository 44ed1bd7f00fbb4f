#!/usr/bin/env bash
# Proves that each image `make images` built starts and answers its probe.
# `make images-check` runs it.
#
#   hack/check-images.sh NAME...      (IMAGE_REPO, default molt; the :dev tag)
#
# For every image:
#   - it runs as 65532:65532 and carries the OCI labels source, revision, version;
#   - `probe http://127.0.0.1:1/` exits 1 and says why (nothing listens there).
# For a service image, the service really starts, as a Deployment runs it (read-only
# root, all capabilities dropped, no privilege escalation), on the host network, with a
# NATS server of bin/ and a kubeconfig whose API server does not answer:
#   - `probe .../healthz`, run inside the container (docker exec), exits 0;
#   - the NATS server lists its connection, molt-NAME;
#   - `probe .../readyz` exits 1 with "503 ... not ready: kubernetes: ..." (or another
#     check that needs the API server, such as informers; not nats).
# It needs bash, coreutils and docker only (no python3, curl or nc).
# For molt-devruntime, which needs a cluster and privileges to serve: without a
# command it prints its usage and exits 1. For nats-server (deploy/nats's image),
# JetStream starts and its monitoring /healthz answers 200.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE_REPO="${IMAGE_REPO:-molt}"
[[ $# -gt 0 ]] || { sed -n '2,20p' "$0" >&2; exit 1; }

docker_cli() {
	if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}
docker_cli info >/dev/null 2>&1 || { echo "check-images: no Docker daemon answers: run \`make images\` (hack/docker.sh ensure)" >&2; exit 1; }
[[ -x "${ROOT}/bin/nats-server" ]] || { echo "check-images: bin/nats-server is missing: run \`make images-check\` (it builds it) or \`make tools\`" >&2; exit 1; }

WORK="$(mktemp -d /tmp/molt-check-images.XXXXXX)"
containers=()
nats_pid=""
cleanup() {
	for c in "${containers[@]}"; do docker_cli rm -f "${c}" >/dev/null 2>&1 || true; done
	if [[ -n "${nats_pid}" ]]; then kill "${nats_pid}" 2>/dev/null || true; wait "${nats_pid}" 2>/dev/null || true; fi
	rm -rf "${WORK}"
}
trap cleanup EXIT

failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok   $*"; }

# listening PORT: something accepts connections on 127.0.0.1:PORT (bash's
# /dev/tcp, so that a fresh Debian machine needs no python3, ss or nc).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints a port of 127.0.0.1 that nothing listens on, from 20000-29999
# (below Linux's ephemeral range, where outgoing connections take theirs).
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 10000))
		listening "${port}" || { echo "${port}"; return 0; }
	done
	echo "check-images: no free port of 127.0.0.1 in 20000-29999 after 100 tries" >&2
	return 1
}

# The NATS server the services connect to (JetStream, loopback only).
nats_port="$(free_port)"
nats_mon_port="$(free_port)"
"${ROOT}/bin/nats-server" -a 127.0.0.1 -p "${nats_port}" -m "${nats_mon_port}" -js -sd "${WORK}/jetstream" >"${WORK}/nats.log" 2>&1 &
nats_pid=$!
# nats_connz prints the server's list of client connections (its monitoring
# endpoint, HTTP over bash's /dev/tcp: no curl needed).
nats_connz() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/${nats_mon_port}" || exit 0
		printf 'GET /connz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		timeout 5 cat <&3
	) 2>/dev/null
}
for _ in $(seq 1 40); do
	listening "${nats_port}" && break
	if ! kill -0 "${nats_pid}" 2>/dev/null; then
		echo "check-images: bin/nats-server exited at start; its log:" >&2
		tail -20 "${WORK}/nats.log" >&2
		exit 1
	fi
	sleep 0.25
done
listening "${nats_port}" || { echo "check-images: bin/nats-server does not listen on 127.0.0.1:${nats_port} after 10s; its log:" >&2; tail -20 "${WORK}/nats.log" >&2; exit 1; }

# A kubeconfig whose API server refuses connections: the service starts, serves
# /healthz, and is not ready.
cat >"${WORK}/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
EOF
chmod 0644 "${WORK}/kubeconfig"

# expect_exit WANT_CODE WANT_TEXT LABEL -- COMMAND...: the command exits WANT_CODE and
# prints WANT_TEXT (stdout or stderr).
expect_exit() {
	local want_code="$1" want_text="$2" label="$3"
	shift 4
	local out code=0
	out="$("$@" 2>&1)" || code=$?
	if [[ "${code}" != "${want_code}" ]]; then
		fail "${label}: exit ${code}, want ${want_code}: ${out}"
	elif [[ "${out}" != *"${want_text}"* ]]; then
		fail "${label}: output ${out@Q} lacks ${want_text@Q}"
	else
		pass "${label}: exit ${code}: ${out%%$'\n'*}"
	fi
}

# http_get PORT PATH prints the answer of 127.0.0.1:PORT to GET PATH (bash's /dev/tcp).
http_get() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0
		printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
		timeout 5 cat <&3
	) 2>/dev/null
}

# check_nats_image IMAGE: the NATS server of deploy/nats starts as the StatefulSet
# runs it (read-only root, all capabilities dropped, its store on a volume) and its
# monitoring endpoint answers /healthz?js-enabled-only=true with 200 (the
# StatefulSet's probes are httpGet on that port: the image has no probe mode).
check_nats_image() {
	local image="$1" c="molt-check-nats-server-$$" port mon out
	port="$(free_port)"
	mon="$(free_port)"
	containers+=("${c}")
	if ! out="$(docker_cli run -d --name "${c}" --network host --read-only --cap-drop ALL \
		--security-opt no-new-privileges --tmpfs /data:uid=65532,gid=65532 \
		"${image}" -a 127.0.0.1 -p "${port}" -m "${mon}" -js -sd /data/jetstream 2>&1)"; then
		fail "${image}: docker run failed: ${out}"
		return
	fi
	for _ in $(seq 1 40); do
		[[ "$(http_get "${mon}" '/healthz?js-enabled-only=true')" == "HTTP/1.0 200"* ]] && break
		sleep 0.25
	done
	out="$(http_get "${mon}" '/healthz?js-enabled-only=true')"
	if [[ "${out}" == "HTTP/1.0 200"* ]]; then
		pass "${image} (running): /healthz?js-enabled-only=true answers 200"
	else
		fail "${image}: /healthz?js-enabled-only=true on 127.0.0.1:${mon} answered ${out@Q}; its log:"
		docker_cli logs --tail 20 "${c}" >&2 || true
	fi
	docker_cli rm -f "${c}" >/dev/null
}

for name in "$@"; do
	image="${IMAGE_REPO}/${name}:dev"
	if ! docker_cli image inspect "${image}" >/dev/null 2>&1; then
		fail "${image}: no such image: run \`make images\`"
		continue
	fi
	user="$(docker_cli image inspect -f '{{.Config.User}}' "${image}")"
	[[ "${user}" == 65532:65532 ]] && pass "${image}: user ${user}" || fail "${image}: user ${user@Q}, want 65532:65532"
	for label in source revision version; do
		value="$(docker_cli image inspect -f "{{index .Config.Labels \"org.opencontainers.image.${label}\"}}" "${image}")"
		[[ -n "${value}" ]] && pass "${image}: org.opencontainers.image.${label}=${value}" || fail "${image}: no label org.opencontainers.image.${label}"
	done
	if [[ "${name}" == nats-server ]]; then
		check_nats_image "${image}"
		continue
	fi
	expect_exit 1 "probe http://127.0.0.1:1/: no answer" "${image} probe http://127.0.0.1:1/" -- \
		docker_cli run --rm --network none "${image}" probe http://127.0.0.1:1/

	if [[ "${name}" == molt-devruntime ]]; then
		expect_exit 1 "usage:" "${image} without a command" -- docker_cli run --rm --network none "${image}"
		continue
	fi

	port="$(free_port)"
	c="molt-check-${name}-$$"
	containers+=("${c}")
	if ! out="$(docker_cli run -d --name "${c}" --network host --read-only --cap-drop ALL \
		--security-opt no-new-privileges -v "${WORK}/kubeconfig:/etc/molt/kubeconfig:ro" \
		"${image}" --kubeconfig=/etc/molt/kubeconfig --nats-url="nats://127.0.0.1:${nats_port}" \
		--http-addr="127.0.0.1:${port}" 2>&1)"; then
		fail "${image}: docker run failed: ${out}"
		continue
	fi
	healthy=""
	for _ in $(seq 1 60); do
		if [[ "$(docker_cli inspect -f '{{.State.Running}}' "${c}")" != true ]]; then
			break
		fi
		if docker_cli exec "${c}" "/${name}" probe "http://127.0.0.1:${port}/healthz" >/dev/null 2>&1; then
			healthy=yes
			break
		fi
		sleep 0.5
	done
	if [[ -z "${healthy}" ]]; then
		fail "${image}: /healthz never answered 2xx within 30s ($(docker_cli inspect -f 'running={{.State.Running}} exit={{.State.ExitCode}}' "${c}")); its log:"
		docker_cli logs --tail 20 "${c}" >&2 || true
		continue
	fi
	expect_exit 0 "ok" "${image} (running) probe /healthz" -- \
		docker_cli exec "${c}" "/${name}" probe "http://127.0.0.1:${port}/healthz"
	# The service reaches NATS: the server lists its connection (molt-NAME).
	# Until then /readyz may name nats rather than kubernetes (it reports the
	# first failing check, in no fixed order).
	connected=""
	for _ in $(seq 1 20); do
		[[ "$(nats_connz)" =~ \"name\":\ *\"molt-${name}\" ]] && { connected=yes; break; }
		sleep 0.5
	done
	if [[ -n "${connected}" ]]; then
		pass "${image} (running): connected to NATS as molt-${name}"
	else
		fail "${image}: no NATS connection named molt-${name} after 10s (nats-server on 127.0.0.1:${nats_port}); its log:"
		docker_cli logs --tail 20 "${c}" >&2 || true
	fi
	# /readyz names the first failing check, in no fixed order: kubernetes, or a
	# service's own check that needs the API server (informers); not nats, which
	# the service reaches.
	code=0
	out="$(docker_cli exec "${c}" "/${name}" probe "http://127.0.0.1:${port}/readyz" 2>&1)" || code=$?
	if [[ "${code}" == 1 && "${out}" =~ "answered 503 Service Unavailable: not ready: "([a-z]+): && "${BASH_REMATCH[1]}" != nats ]]; then
		pass "${image} (running) probe /readyz: exit 1: ${out}"
	else
		fail "${image} (running) probe /readyz: exit ${code}: ${out@Q}; want exit 1 and \"503 Service Unavailable: not ready: CHECK\" for a check other than nats"
	fi
	docker_cli rm -f "${c}" >/dev/null
done

if [[ "${failures}" -gt 0 ]]; then
	echo "check-images: ${failures} check(s) failed" >&2
	exit 1
fi
echo "check-images: every image starts and answers its probe"
