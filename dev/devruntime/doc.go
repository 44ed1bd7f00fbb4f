// Package devruntime is the development agent-runtime: it serves the envd
// process protocol (process.Process/Start, see package agentruntime) for
// every running pod of the local stack, so that lifecycle hooks run for
// real on kwok's fake nodes.
//
// Serve watches pods and, for each Running pod on a node with a loopback
// pod IP (kwok hands out 127.100.0.0/16), listens on <podIP>:49983. Every
// call must carry the pod's sandbox's runtime-access-token as
// X-Access-Token; without that annotation every call is refused.
//
// A command runs in new mount, UTS and PID namespaces, with the pod's own
// root directory as its root: the host's /usr, /etc, /bin, /sbin, /lib* and
// /sys read-only (so bash, tar and gzip are the host's and cannot be
// changed), a read-only /dev of a few devices, a new /proc that shows only
// the command's own processes (it is pid 1), and everything else private
// to the pod UID, writable and gone when the pod is, with the pod's volumes
// bound over their mount paths: persistentVolumeClaim, csi and hostPath
// volumes from directories that outlive the pod, emptyDir from one that
// does not. `hostname` prints the pod name. The command keeps only the
// capabilities that cannot undo this (no sys_admin, no mknod, ...).
//
// The namespaces are set up by this process's own executable re-run as an
// init helper: every binary that serves the handler (the molt-devruntime
// command, and the tests) calls MaybeRunInit first thing in main or
// TestMain. It needs root and Linux 5.12 or later.
package devruntime
