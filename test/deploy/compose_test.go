package deploy

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// repoRoot is the repository, relative to this module.
var repoRoot = filepath.Join("..", "..")

// grafanaService is the one service whose image is not built here (no
// registry is reachable from these machines), under the profile grafana.
const grafanaService = "grafana"

// hostSystemDirs are the host directories molt-devruntime may bind, read-only:
// what a pod's view shows of the host (dev/devruntime).
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"}

// loadCompose loads docker-compose.yaml as `docker compose` does, every
// profile enabled, in an empty environment (each variable at its default).
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yaml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("molt", true)
		o.Profiles = []string{"*"}
	})
	if err != nil {
		t.Fatalf("load docker-compose.yaml: %v", err)
	}
	return p
}

// builtImages are the names of the images the Makefile builds (make
// compose-images, which runs make images first), read from the commands
// `make -n compose-images` would run: the NAME of each NAME=SOURCE argument
// of hack/build-images.sh.
func builtImages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("make", "-n", "--no-print-directory", "compose-images")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n compose-images: %v\n%s", err, out)
	}
	var names []string
	arg := regexp.MustCompile(`(?:^|\s)([a-z0-9-]+)=\S`)
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "hack/build-images.sh") {
			continue
		}
		for _, m := range arg.FindAllStringSubmatch(line[strings.Index(line, "hack/build-images.sh"):], -1) {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("make -n compose-images runs no hack/build-images.sh NAME=SOURCE:\n%s", out)
	}
	return names
}

// TestComposeFile (issue 11): docker-compose.yaml loads as `docker compose`
// loads it, and
//   - every service that keeps running has an exec-form health check, and
//     every one-shot (init, install) is waited for by completion;
//   - every depends_on waits for health, or for a one-shot's success;
//   - every published port binds 127.0.0.1;
//   - every image is one the Makefile builds, never pulled, except Grafana's,
//     under its own profile;
//   - state lives on named volumes, declared at the top; bind mounts are the
//     repository's files (read-only) and .molt/compose, or the host's system
//     directories, read-only, for molt-devruntime.
func TestComposeFile(t *testing.T) {
	p := loadCompose(t)
	built := builtImages(t)
	root, _ := filepath.Abs(repoRoot)

	// A one-shot is what some service waits for by completion.
	oneShot := map[string]bool{}
	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionCompletedSuccessfully {
				oneShot[dep] = true
			}
		}
	}
	if want := []string{"init", "install"}; !slices.Equal(sortedKeys(oneShot), want) {
		t.Errorf("one-shot services %v, want %v", sortedKeys(oneShot), want)
	}
	for _, want := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "nats",
		"selector", "patcher", "hookrunner", "podcycler", "statusagg", "molt-devruntime", "molt-devnode", "prometheus", grafanaService} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("no service %s", want)
		}
	}

	for name, s := range p.Services {
		// Health checks and what waits for what.
		switch {
		case oneShot[name]:
			if s.Restart != "" && s.Restart != types.RestartPolicyNo {
				t.Errorf("%s: one-shot with restart %q: it would run again after it succeeded", name, s.Restart)
			}
		case s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2:
			t.Errorf("%s: no health check", name)
		case s.HealthCheck.Test[0] != "CMD":
			t.Errorf("%s: health check %q is not exec form ([\"CMD\", ...]): an image FROM scratch has no shell", name, s.HealthCheck.Test)
		}
		for dep, d := range s.DependsOn {
			want := types.ServiceConditionHealthy
			if oneShot[dep] {
				want = types.ServiceConditionCompletedSuccessfully
			}
			if d.Condition != want {
				t.Errorf("%s depends on %s with condition %q, want %q", name, dep, d.Condition, want)
			}
		}

		// Ports.
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" || port.Published == "" {
				t.Errorf("%s publishes port %d on %q:%q, want 127.0.0.1 and a fixed port", name, port.Target, port.HostIP, port.Published)
			}
		}

		// Images.
		if name == grafanaService {
			if !slices.Equal(s.Profiles, []string{"grafana"}) {
				t.Errorf("%s: profiles %v, want [grafana]: its image is not built here", name, s.Profiles)
			}
		} else {
			image, tag, _ := strings.Cut(s.Image, ":")
			short, ok := strings.CutPrefix(image, "molt/")
			if !ok || tag != "dev" || !slices.Contains(built, short) {
				t.Errorf("%s: image %q is not molt/NAME:dev for an image the Makefile builds (%v)", name, s.Image, built)
			}
			if s.PullPolicy != types.PullPolicyNever {
				t.Errorf("%s: pull_policy %q, want never: no registry is reachable, every image is built here", name, s.PullPolicy)
			}
			if len(s.Profiles) > 0 {
				t.Errorf("%s: profiles %v: only grafana is optional", name, s.Profiles)
			}
		}

		// Volumes.
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeVolume:
				if v.Source == "" {
					t.Errorf("%s: anonymous volume at %s: name it", name, v.Target)
				} else if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %s is not declared under volumes:", name, v.Source)
				}
			case types.VolumeTypeBind:
				rel, err := filepath.Rel(root, v.Source)
				inRepo := err == nil && !strings.HasPrefix(rel, "..")
				switch {
				case inRepo && rel == filepath.Join(".molt", "compose"):
					// the host's kubeconfig, written by init
				case inRepo && !v.ReadOnly:
					t.Errorf("%s: binds %s writable: the repository's files are mounted read-only", name, rel)
				case inRepo:
				case name == "molt-devruntime" && slices.Contains(hostSystemDirs, v.Source) && v.ReadOnly && v.Source == v.Target:
				default:
					t.Errorf("%s: binds %s at %s: state goes on a named volume", name, v.Source, v.Target)
				}
			default:
				t.Errorf("%s: %s mount at %s: use a named volume", name, v.Type, v.Target)
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
