// Package tools pins the code generators that hack/update-codegen.sh builds
// into bin/: k8s.io/code-generator (deepcopy-gen, client-gen, lister-gen,
// informer-gen) and sigs.k8s.io/controller-tools (controller-gen). The
// imports live in tools.go behind the "tools" build tag; this file keeps the
// package visible to `go vet ./...` without it.
package tools
