// Command molt-local runs molt's whole local stack as background processes:
// the control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok with fake nodes), a NATS server with JetStream, the
// development node agent and molt's five services.
//
//	molt-local up      start what is not running and wait until all is ready
//	molt-local down    stop exactly the processes `up` started (by pid)
//	molt-local status  say what runs
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: molt-local up|down|status")
		os.Exit(2)
	}
	cfg, err := loadConfig()
	if err == nil {
		switch os.Args[1] {
		case "up":
			err = up(cfg)
		case "down":
			err = down(cfg)
		case "status":
			err = status(cfg)
		default:
			err = fmt.Errorf("unknown command %q: use up, down or status", os.Args[1])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "molt-local:", err)
		os.Exit(1)
	}
}
