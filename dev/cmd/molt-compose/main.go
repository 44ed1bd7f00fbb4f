// Command molt-compose does the one-shot jobs of docker-compose.yaml, the
// local stack in containers, and is the health check of the images whose
// program has none of its own.
//
//	molt-compose init [flags]
//	    make what the stack authenticates with, keeping what exists: the
//	    control plane's service-account keys and admin token, the kubeconfig
//	    of the containers and the host's, the NATS passwords (one file per
//	    user, each readable only by its service's uid) and the NATS server's
//	    auth config (deploy/nats/auth.conf with the passwords defined above
//	    it); give each data volume to the uid that writes it
//	molt-compose install --kubeconfig K --crds DIR [--nodes 3]
//	    install molt's CRDs and wait until they are Established, create the
//	    kwok nodes and wait until they are Ready and untainted (what `make up`
//	    does after its control plane starts)
//	molt-compose probe [--insecure-skip-tls-verify] URL
//	    GET URL; exit 0 on a 2xx answer, 1 otherwise (the control plane's
//	    health endpoints are https with a self-signed certificate)
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"molt.dev/dev/devcluster"
	"molt.dev/pkg/service"
)

const usage = `usage:
  molt-compose init [--pki-dir D] [--kube-dir D] [--nats-dir D] [--nats-auth-conf F] [--host-dir D] [--server URL] [--host-server URL] [--uid NAME=UID]... [--chown DIR=UID]...
  molt-compose install --kubeconfig K --crds DIR [--nodes 3]
  molt-compose probe [--insecure-skip-tls-verify] URL`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "molt-compose:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch args[0] {
	case "init":
		return initCommand(args[1:])
	case "install":
		return install(ctx, args[1:])
	case service.ProbeCommand:
		return probe(args[1:])
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func install(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("install", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (env KUBECONFIG)")
	crds := fs.String("crds", "", "directory of the CRD manifests (deploy/crds)")
	policy := fs.String("admission-policy", "", "comma-separated files of the admission policies to install after the CRDs (deploy/admission/one-active-ops.yaml,deploy/admission/sandbox-labels.yaml); empty installs none")
	nodes := fs.Int("nodes", 3, "how many kwok nodes to create")
	timeout := fs.Duration("timeout", 3*time.Minute, "deadline of the whole install")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *crds == "" {
		return errors.New("--crds is required")
	}
	if *nodes < 1 {
		return fmt.Errorf("--nodes %d: want at least 1", *nodes)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cfg, err := service.LoadRestConfig(*kubeconfig)
	if err != nil {
		return err
	}
	if err := devcluster.InstallCRDs(ctx, cfg, *crds); err != nil {
		return err
	}
	fmt.Printf("CRDs of %s established\n", *crds)
	if *policy != "" {
		if err := devcluster.InstallAdmissionPolicy(ctx, cfg, strings.Split(*policy, ",")...); err != nil {
			return err
		}
		fmt.Printf("admission policy %s installed\n", *policy)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	if err := devcluster.EnsureNodes(ctx, kube, *nodes); err != nil {
		return err
	}
	fmt.Printf("%d kwok nodes ready\n", *nodes)
	return nil
}

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	insecure := fs.Bool("insecure-skip-tls-verify", false, "accept any certificate (the control plane's are self-signed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *insecure {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a health check of a container's own loopback port
		http.DefaultClient.Transport = t
	}
	if code := service.RunProbe("molt-compose", fs.Args(), os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
	return nil
}
