#!/usr/bin/env bash
# The end-to-end test of docker-compose.yaml (make compose-test):
#   1. make compose-images (installs docker.io and starts dockerd if no daemon
#      answers, builds every image), and the Docker Compose plugin
#      (hack/compose-plugin.sh builds it from its Go module if missing);
#   2. `docker compose up --wait`: every container healthy, the one-shots done;
#   3. seed 000's basic example, as the README prints it, through the published
#      API server: ten sandboxes, then the ops upgrade-my-sandboxes, until
#      `kubectl get suo` says Completed 10 10 0 0; one ops with a preUpgrade and a
#      postUpgrade hook (hookrunner reaches molt-devruntime); and one ops that
#      fails (an image that cannot be pulled), for the dashboard's failure panel;
#   4. test/deploy's TestComposeStackPrometheus against the stack's Prometheus:
#      molt's metrics of that ops, and every query of deploy/grafana/molt.json
#      returns data;
#   5. `docker compose down -v`, pass or fail (MOLT_COMPOSE_KEEP=1 keeps the
#      stack up to look at it), and `hack/docker.sh stop` if no Docker daemon
#      answered when it began (it stops only the dockerd that it started).
# On a failure it prints `docker compose ps`, the logs of every container that
# is not healthy or did not exit 0, and the ops and sandboxes.
#
# The stack is the project molt-compose-test, on docker-compose.yaml's ports
# (each can be moved with its variable, see the file); its kubeconfig goes to
# a temporary directory, not .molt/compose.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
GO="${GO:-go}"
PROJECT=molt-compose-test
KUBECTL="${ROOT}/bin/kubectl"
WORK="$(mktemp -d /tmp/molt-compose-test.XXXXXX)"
export MOLT_COMPOSE_DIR="${WORK}/host"
export KUBECONFIG="${MOLT_COMPOSE_DIR}/kubeconfig"
APISERVER_PORT="${MOLT_COMPOSE_APISERVER_PORT:-17443}"
PROMETHEUS_PORT="${MOLT_COMPOSE_PROMETHEUS_PORT:-19090}"
started=$SECONDS

log() { echo "compose-test: $*" >&2; }

docker_cli() {
	if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}
compose() { docker_cli compose -p "${PROJECT}" -f "${ROOT}/docker-compose.yaml" "$@"; }

# diagnose prints what runs and the logs of every container that is not
# healthy, or that exited with another code than 0.
diagnose() {
	log "docker compose ps:"
	compose ps -a >&2 || true
	local id name state health code waiting=()
	for id in $(compose ps -a -q 2>/dev/null); do
		name="$(docker_cli inspect -f '{{.Name}}' "${id}")"
		state="$(docker_cli inspect -f '{{.State.Status}}' "${id}")"
		health="$(docker_cli inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "${id}")"
		code="$(docker_cli inspect -f '{{.State.ExitCode}}' "${id}")"
		if [[ "${health}" == healthy || ("${state}" == exited && "${code}" == 0 && -z "${health}") ]]; then
			continue
		fi
		if [[ "${state}" == created ]]; then
			waiting+=("${name#/}")
			continue
		fi
		log "container ${name#/}: ${state} ${health:+(${health}) }exit ${code}; its last log lines:"
		docker_cli logs --tail 40 "${id}" 2>&1 | sed 's/^/    /' >&2 || true
		if [[ -n "${health}" ]]; then
			log "its last health checks:"
			docker_cli inspect -f '{{range .State.Health.Log}}    exit {{.ExitCode}}: {{.Output}}{{end}}' "${id}" >&2 || true
		fi
	done
	if [[ ${#waiting[@]} -gt 0 ]]; then
		log "never started (each waits for one above): ${waiting[*]}"
	fi
}

fail() {
	log "FAIL: $*"
	diagnose
	if [[ -s "${KUBECONFIG}" ]]; then
		log "kubectl get suo,sbx -A:"
		"${KUBECTL}" get suo,sbx -A -o wide >&2 2>&1 || true
	fi
	exit 1
}

cleanup() {
	local rc=$?
	trap - EXIT
	if [[ "${MOLT_COMPOSE_KEEP:-}" == 1 ]]; then
		log "MOLT_COMPOSE_KEEP=1: the stack stays up; KUBECONFIG=${KUBECONFIG}; stop it with \`docker compose -p ${PROJECT} down -v\`"
	else
		compose down -v --remove-orphans >/dev/null 2>&1 || log "docker compose down -v failed: run \`docker compose -p ${PROJECT} down -v\`"
		rm -rf "${WORK}"
		if [[ -n "${started_docker}" ]]; then
			hack/docker.sh stop || log "hack/docker.sh stop failed: see \`hack/docker.sh status\`"
		fi
	fi
	if [[ ${rc} == 0 ]]; then
		log "PASS in $((SECONDS - started))s"
	else
		log "FAIL after $((SECONDS - started))s"
	fi
	exit "${rc}"
}
started_docker=""
trap cleanup EXIT

# listening PORT: something accepts connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for SECONDS WHAT COMMAND...: run COMMAND every second until it succeeds.
wait_for() {
	local timeout="$1" what="$2"
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		((SECONDS < deadline)) || fail "${what}: not within ${timeout}s"
		sleep 1
	done
}

docker_cli info >/dev/null 2>&1 || started_docker=yes
"${MAKE:-make}" --no-print-directory compose-images GO="${GO}" || { log "make compose-images failed (errors above)"; exit 1; }
[[ -x "${KUBECTL}" ]] || { log "bin/kubectl is missing: run \`make tools\`"; exit 1; }
GO="${GO}" hack/compose-plugin.sh
for port in "${APISERVER_PORT}" "${PROMETHEUS_PORT}" "${MOLT_COMPOSE_NATS_PORT:-14222}"; do
	if listening "${port}"; then
		log "127.0.0.1:${port} is taken (another \`docker compose up\`?): stop it, or move the stack's ports (MOLT_COMPOSE_*_PORT, see docker-compose.yaml)"
		exit 1
	fi
done
mkdir -p "${MOLT_COMPOSE_DIR}"

log "docker compose up --wait (project ${PROJECT})"
up_started=$SECONDS
compose up -d --wait --wait-timeout 300 || fail "docker compose up --wait"
log "every container healthy in $((SECONDS - up_started))s"
[[ -s "${KUBECONFIG}" ]] || fail "init wrote no kubeconfig at ${KUBECONFIG}"

# Seed 000's basic example, as the README prints it.
log "seed 000's basic example: ten sandboxes through https://127.0.0.1:${APISERVER_PORT}"
for i in $(seq -w 0 9); do "${KUBECTL}" apply -f - >/dev/null <<YAML || fail "kubectl apply of sandbox box-$i"
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata: {name: box-$i, namespace: default, labels: {agents.kruise.io/sandbox-template: my-sandbox-pool}}
spec:
  template:
    spec:
      containers: [{name: sandbox, image: my-registry/sandbox-image:v1}]
YAML
done
all_running() { [[ "$("${KUBECTL}" get sbx -n default --no-headers 2>/dev/null | awk '$2 == "Running"' | wc -l)" == 10 ]]; }
wait_for 120 "ten sandboxes Running" all_running
"${KUBECTL}" apply -f test/seeds/manifests/000-01-sandboxupdateops-upgrade-my-sandboxes.yaml >/dev/null || fail "kubectl apply of the ops"
suo_line() { "${KUBECTL}" get suo upgrade-my-sandboxes -n default --no-headers 2>/dev/null | awk '{print $2, $3, $4, $5, $6}'; }
completed() { [[ "$(suo_line)" == "Completed 10 10 0 0" ]]; }
wait_for 180 "kubectl get suo upgrade-my-sandboxes says Completed 10 10 0 0 (it says: $(suo_line))" completed
log "kubectl get suo: $("${KUBECTL}" get suo upgrade-my-sandboxes -n default --no-headers | tr -s ' ')"

# Hooks: hookrunner reaches a pod's agent-runtime (molt-devruntime, in whose
# network namespace it runs) before and after the pod is recreated.
"${KUBECTL}" apply -f - >/dev/null <<YAML || fail "kubectl apply of sandbox hooked-0"
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata: {name: hooked-0, namespace: default, labels: {agents.kruise.io/sandbox-template: hooked-pool}}
spec:
  template:
    spec:
      containers: [{name: sandbox, image: my-registry/sandbox-image:v1}]
YAML
hooked_running() { [[ "$("${KUBECTL}" get sbx hooked-0 -n default --no-headers 2>/dev/null | awk '{print $2}')" == Running ]]; }
wait_for 60 "sandbox hooked-0 Running" hooked_running
"${KUBECTL}" apply -f - >/dev/null <<YAML || fail "kubectl apply of the ops upgrade-hooked"
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: {name: upgrade-hooked, namespace: default}
spec:
  selector: {matchLabels: {agents.kruise.io/sandbox-template: hooked-pool}}
  updateStrategy: {maxUnavailable: 1}
  patch:
    spec:
      containers: [{name: sandbox, image: my-registry/sandbox-image:v2}]
  lifecycle:
    preUpgrade: {exec: {command: [/bin/bash, -c, 'echo "backup of \$(hostname)"']}, timeoutSeconds: 60}
    postUpgrade: {exec: {command: [/bin/bash, -c, 'test "\$(hostname)" = hooked-0']}, timeoutSeconds: 60}
YAML
hooked_completed() { [[ "$("${KUBECTL}" get suo upgrade-hooked -n default --no-headers 2>/dev/null | awk '{print $2, $3, $4, $5, $6}')" == "Completed 1 1 0 0" ]]; }
wait_for 120 "ops upgrade-hooked (a preUpgrade and a postUpgrade hook) Completed 1 1 0 0" hooked_completed
hook_logs="$(compose logs hookrunner 2>&1)"
for stage in PreUpgrade PostUpgrade; do
	[[ "${hook_logs}" =~ \"hook\ succeeded\"[^$'\n']*sandbox=\"default/hooked-0\"[^$'\n']*stage=\"${stage}\" ]] ||
		fail "hookrunner's log has no \"hook succeeded\" of sandbox default/hooked-0 in stage ${stage}"
done
log "hooks ran (hookrunner's log: hook succeeded, PreUpgrade and PostUpgrade): kubectl get suo: $("${KUBECTL}" get suo upgrade-hooked -n default --no-headers | tr -s ' ')"

# One ops that fails, for the dashboard's failure panel.
"${KUBECTL}" apply -f - >/dev/null <<YAML || fail "kubectl apply of sandbox broken-0"
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata: {name: broken-0, namespace: default, labels: {agents.kruise.io/sandbox-template: broken-pool}}
spec:
  template:
    spec:
      containers: [{name: sandbox, image: my-registry/sandbox-image:v1}]
YAML
broken_running() { [[ "$("${KUBECTL}" get sbx broken-0 -n default --no-headers 2>/dev/null | awk '{print $2}')" == Running ]]; }
wait_for 60 "sandbox broken-0 Running" broken_running
"${KUBECTL}" apply -f - >/dev/null <<YAML || fail "kubectl apply of the ops upgrade-broken"
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: {name: upgrade-broken, namespace: default}
spec:
  selector: {matchLabels: {agents.kruise.io/sandbox-template: broken-pool}}
  updateStrategy: {maxUnavailable: 1}
  patch:
    spec:
      containers: [{name: sandbox, image: my-registry/non-existent:v2}]
YAML
failed() { [[ "$("${KUBECTL}" get suo upgrade-broken -n default --no-headers 2>/dev/null | awk '{print $2}')" == Failed ]]; }
wait_for 180 "ops upgrade-broken Failed" failed

log "Prometheus on 127.0.0.1:${PROMETHEUS_PORT}: molt's metrics of the ops and the dashboard's queries"
(cd test/deploy && GOWORK=off MOLT_COMPOSE_PROMETHEUS="127.0.0.1:${PROMETHEUS_PORT}" MOLT_COMPOSE_OPS=default/upgrade-my-sandboxes \
	MOLT_COMPOSE_SANDBOXES=10 "${GO}" test -count=1 -v -run '^TestComposeStackPrometheus$' .) ||
	fail "test/deploy TestComposeStackPrometheus (errors above)"
