#!/usr/bin/env bash
# Checks that the generated code and CRDs match the API types: regenerates
# them into a temporary copy of pkg/ and deploy/crds with
# hack/update-codegen.sh and diffs the copy against this checkout.
#
# Usage: hack/verify-codegen.sh   (exit 1 and a diff when they drifted)
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
# What update-codegen.sh writes, relative to the repository root.
GENERATED=(
	pkg/apis/agents/v1alpha1/zz_generated.deepcopy.go
	pkg/generated
	deploy/crds
)

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

cp -a "${ROOT}/pkg" "${TMP}/pkg"
mkdir -p "${TMP}/deploy"
if [[ -d "${ROOT}/deploy/crds" ]]; then
	cp -a "${ROOT}/deploy/crds" "${TMP}/deploy/crds"
fi

if ! MOLT_CODEGEN_ROOT="${TMP}" "${ROOT}/hack/update-codegen.sh" >"${TMP}/update.log" 2>&1; then
	cat "${TMP}/update.log" >&2
	echo "hack/update-codegen.sh failed on a copy of this checkout" >&2
	exit 1
fi

drift=0
for path in "${GENERATED[@]}"; do
	if ! diff -ruN "${ROOT}/${path}" "${TMP}/${path}"; then
		drift=1
	fi
done
if [[ "${drift}" -ne 0 ]]; then
	echo "generated code is out of date (diff above: checkout vs regenerated): run hack/update-codegen.sh" >&2
	exit 1
fi
echo "generated code is up to date"
