#!/usr/bin/env bash
# Makes sure the Docker Compose v2 plugin is installed: builds it from its Go
# module (no registry serves its binary here) into ~/.docker/cli-plugins,
# unless `docker compose version` already answers. Takes ~4 minutes cold.
set -euo pipefail

COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
PLUGIN_DIR="${DOCKER_CONFIG:-${HOME}/.docker}/cli-plugins"
GO="${GO:-go}"

docker_cli() {
	if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

if docker_cli compose version >/dev/null 2>&1; then
	exit 0
fi
echo "compose-plugin.sh: building docker-compose ${COMPOSE_VERSION} from github.com/docker/compose/v2 into ${PLUGIN_DIR}" >&2
export GOWORK=off GOFLAGS=-mod=mod
"${GO}" mod download "github.com/docker/compose/v2@${COMPOSE_VERSION}" ||
	{ echo "compose-plugin.sh: go mod download github.com/docker/compose/v2@${COMPOSE_VERSION} failed (errors above): check GOPROXY" >&2; exit 1; }
src="$("${GO}" env GOMODCACHE)/github.com/docker/compose/v2@${COMPOSE_VERSION}"
mkdir -p "${PLUGIN_DIR}"
(cd "${src}" && CGO_ENABLED=0 "${GO}" build -trimpath \
	-ldflags="-s -w -X github.com/docker/compose/v2/internal.Version=${COMPOSE_VERSION}" \
	-o "${PLUGIN_DIR}/docker-compose" ./cmd) ||
	{ echo "compose-plugin.sh: go build of docker compose failed (errors above)" >&2; exit 1; }
docker_cli compose version >&2 || { echo "compose-plugin.sh: built ${PLUGIN_DIR}/docker-compose but \`docker compose version\` fails" >&2; exit 1; }
