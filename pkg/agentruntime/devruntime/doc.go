// Package devruntime is the development agent-runtime: it serves the envd
// process protocol (process.Process/Start, see package agentruntime) for
// every running pod of the local stack, so that lifecycle hooks run for
// real on kwok's fake nodes.
//
// Serve watches pods and, for each Running pod on a node with a loopback
// pod IP (kwok hands out 127.100.0.0/16), listens on <podIP>:49983. A
// command runs in new mount and UTS namespaces, chrooted into the pod's own
// root directory: the host's /usr, /etc, /dev, /proc and /sys (so bash, tar
// and gzip are the host's) plus everything else private to the pod UID and
// gone when the pod is, with the pod's volumes bound over their mount
// paths: persistentVolumeClaim, csi and hostPath volumes from directories
// that outlive the pod, emptyDir from one that does not. `hostname` prints
// the pod name.
//
// The namespaces are set up by this process's own executable re-run as an
// init helper: every binary that serves the handler (the molt-devruntime
// command, and the tests) calls MaybeRunInit first thing in main or
// TestMain. It needs root.
package devruntime
