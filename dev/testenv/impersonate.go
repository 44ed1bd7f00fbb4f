package testenv

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigAs writes, in t's temp dir, a copy of the environment's
// kubeconfig that impersonates user, and returns its path: a client the API
// server authorizes as that user (with no RBAC of its own, it may do nothing).
func (e *Env) KubeconfigAs(t testing.TB, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
