// Package testenv is the integration-test harness: once per test package
// (from TestMain) it starts the real local control plane of dev/devcluster
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok with
// fake nodes), the development node agent, and an in-process NATS server
// with JetStream, all on free ports; it installs molt's CRDs and gives each
// test its own namespace. A missing binary fails the package with the make
// target that builds it; nothing is skipped.
package testenv
