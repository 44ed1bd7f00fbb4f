#!/usr/bin/env bash
# Regenerates the Go code of molt's .proto files:
#   pkg/agentruntime/proto/**/*.proto  ->  pkg/agentruntime/gen/...
#     protoc-gen-go          messages       (google.golang.org/protobuf)
#     protoc-gen-connect-go  connect stubs  (connectrpc.com/connect)
#
# No protoc: tools/protogen compiles the files with bufbuild/protocompile and
# runs the plugins. The driver and the plugins are pinned in
# tools/protogen/go.mod and built into bin/ when a binary is missing or older
# than that go.mod (or, for the driver, its source).
#
# Usage: hack/update-proto.sh            regenerate in this checkout
#        hack/update-proto.sh --verify   regenerate into a temp copy and diff
#                                        it against this checkout (exit 1 on drift)
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${ROOT}/bin"
TOOLS_DIR="${ROOT}/tools/protogen"
PROTO_DIR="pkg/agentruntime/proto"
GEN_DIR="pkg/agentruntime/gen"

# Tools are built outside the workspace, each module with its own pins.
export GOWORK=off

# ensure_tool NAME PKG builds bin/NAME from PKG in tools/protogen when the
# binary is missing or older than any file of tools/protogen.
ensure_tool() {
	local name="$1" pkg="$2"
	if [[ -x "${BIN}/${name}" && -z "$(find "${TOOLS_DIR}" -type f -newer "${BIN}/${name}" -print -quit)" ]]; then
		return 0
	fi
	echo "building ${name} (${pkg})"
	mkdir -p "${BIN}"
	(cd "${TOOLS_DIR}" && go build -o "${BIN}/${name}" "${pkg}")
}

# generate OUT writes the generated tree for the checkout's protos under OUT.
generate() {
	local out="$1"
	local files=()
	while IFS= read -r f; do files+=("${f}"); done < <(cd "${ROOT}/${PROTO_DIR}" && find . -name '*.proto' | sed 's|^\./||' | sort)
	rm -rf "${out}"
	mkdir -p "${out}"
	"${BIN}/protogen" -I "${ROOT}/${PROTO_DIR}" -out "${out}" \
		-plugin "${BIN}/protoc-gen-go:paths=source_relative" \
		-plugin "${BIN}/protoc-gen-connect-go:paths=source_relative" \
		"${files[@]}"
}

ensure_tool protogen molt.dev/tools/protogen
ensure_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
ensure_tool protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go

case "${1:-}" in
"")
	generate "${ROOT}/${GEN_DIR}"
	echo "generated ${GEN_DIR}"
	;;
--verify)
	TMP="$(mktemp -d)"
	trap 'rm -rf "${TMP}"' EXIT
	generate "${TMP}/gen"
	if ! diff -ruN "${ROOT}/${GEN_DIR}" "${TMP}/gen"; then
		echo "${GEN_DIR} is out of date (diff above: checkout vs regenerated): run hack/update-proto.sh" >&2
		exit 1
	fi
	echo "${GEN_DIR} is up to date"
	;;
*)
	echo "usage: $0 [--verify]" >&2
	exit 2
	;;
esac
