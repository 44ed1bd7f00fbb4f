// Package devcluster starts molt's local Kubernetes control plane from the
// binaries the Makefile builds into bin/: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok (which plays the kubelet
// for fake nodes). The test harness (dev/testenv) starts one per test package
// as child processes; `make up` starts one detached, with pid files, so that
// `make down` can stop exactly what it started.
package devcluster
