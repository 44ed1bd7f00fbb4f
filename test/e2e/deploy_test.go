package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// deployNamespace is where deploy/ installs the services and their
// ServiceAccounts.
const deployNamespace = "molt-system"

// serviceAccountUser is the user name a service's pods authenticate as.
func serviceAccountUser(service string) string {
	return "system:serviceaccount:" + deployNamespace + ":" + service
}

// impersonatingKubeconfig writes into dir a copy of the harness's kubeconfig
// whose every request impersonates service's ServiceAccount (`as:` in the
// kubeconfig), and returns its path. A service started with it gets exactly
// the RBAC deploy/ grants its ServiceAccount (applied with applyDeployRBAC).
func impersonatingKubeconfig(env *testenv.Env, dir, service string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("load kubeconfig %s: %w", env.Kubeconfig, err)
	}
	for _, user := range cfg.AuthInfos {
		user.Impersonate = serviceAccountUser(service)
	}
	path := filepath.Join(dir, "kubeconfig-"+service)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// rbacKinds are what applyDeployRBAC applies of deploy/base, with the
// admission policy that limits the selector's and hookrunner's pod writes
// (servicePodWritesPolicy); not the one-active-ops policy
// (oneActiveOpsPolicy): the package's tests start a second ops beside an
// active one on purpose, to see it wait.
var rbacKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

const (
	servicePodWritesPolicy = "molt-service-pod-writes"
	oneActiveOpsPolicy     = "molt-one-active-ops-per-namespace"
)

// applyDeployRBAC applies, server-side, the namespace, ServiceAccounts and
// RBAC of deploy/base (not its Deployments) to the harness's control plane.
func applyDeployRBAC(env *testenv.Env) error {
	objs, err := renderKustomize(env, "deploy/base")
	if err != nil {
		return err
	}
	var docs []string
	for _, o := range objs {
		if slices.Contains(rbacKinds, o.GetKind()) && o.GetName() != oneActiveOpsPolicy {
			data, err := json.Marshal(o.Object)
			if err != nil {
				return fmt.Errorf("encode %s %s: %w", o.GetKind(), o.GetName(), err)
			}
			docs = append(docs, string(data))
		}
	}
	// As kubectl's own field manager, the one the README's install line
	// applies with: an admission policy's matchConstraints is an atomic
	// struct the API server fills in with defaults, so a second manager
	// applying it (TestDeploy, after the stack) would conflict.
	_, err = runKubectl(env, strings.Join(docs, "\n"), "apply", "--server-side", "--force-conflicts", "--field-manager=kubectl", "-f", "-")
	return err
}

// renderKustomize returns the objects `kubectl kustomize dir` builds (dir
// relative to the repository root).
func renderKustomize(env *testenv.Env, dir string) ([]*unstructured.Unstructured, error) {
	out, err := runKubectl(env, "", "kustomize", filepath.Join(env.RootDir, dir))
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode the output of kubectl kustomize %s: %w", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

// runKubectl runs bin/kubectl against the harness's control plane.
func runKubectl(env *testenv.Env, stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(env.RootDir, "bin", "kubectl"), append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// grant is one permission: a verb on a resource (with its subresource, as
// "sandboxes/status"), in every namespace (namespace "") or in one, on every
// object (name "") or one.
type grant struct {
	service, verb, group, resource, namespace, name string
}

func (g grant) String() string {
	where := "all namespaces"
	if g.namespace != "" {
		where = g.namespace
	}
	what := g.resource
	if g.group != "" {
		what += "." + g.group
	}
	if g.name != "" {
		what += " " + g.name
	}
	return fmt.Sprintf("%s may %s %s in %s", g.service, g.verb, what, where)
}

// groupOf is the API group of each resource molt's RBAC names.
var groupOf = map[string]string{
	"sandboxes": agentsv1alpha1.GroupName, "sandboxupdateops": agentsv1alpha1.GroupName, "sandboxsets": agentsv1alpha1.GroupName, "checkpoints": agentsv1alpha1.GroupName,
	"pods": "", "events": "", "secrets": "", "leases": "coordination.k8s.io",
}

var (
	readmeResource = regexp.MustCompile("^`([a-z]+)(/[a-z]+)?`(?: named `([a-z0-9-]+)`)?$")
	readmeVerbs    = regexp.MustCompile(`^[a-z]+(, [a-z]+)*$`)
)

// readmeGrants reads the README's table of what each service may do (between
// <!-- rbac --> and <!-- /rbac -->): the RBAC deploy/ must grant, no more.
func readmeGrants(t *testing.T) []grant {
	t.Helper()
	var grants []grant
	for _, line := range strings.Split(readmeBlock(t, "rbac"), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || strings.TrimSpace(cells[0]) == "service" || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		service, verbs, on, where := strings.Trim(strings.TrimSpace(cells[0]), "`"), strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])
		m := readmeResource.FindStringSubmatch(on)
		if m == nil {
			m = []string{"", "", "", ""}
		}
		group, known := groupOf[m[1]]
		if !known || !readmeVerbs.MatchString(verbs) {
			t.Fatalf("README rbac row %q: want `| service | verb, verb | `resource[/subresource]` [named `name`] | all namespaces or molt-system | why |`", line)
		}
		ns := ""
		switch where {
		case "all namespaces":
		case deployNamespace:
			ns = deployNamespace
		default:
			t.Fatalf("README rbac row %q: where is %q, want all namespaces or %s", line, where, deployNamespace)
		}
		for _, verb := range strings.Split(verbs, ", ") {
			grants = append(grants, grant{service: service, verb: verb, group: group, resource: m[1] + m[2], namespace: ns, name: m[3]})
		}
	}
	if len(grants) == 0 {
		t.Fatal("README rbac table has no rows")
	}
	return grants
}

// renderedGrants turns the RBAC that kustomize builds from dir into grants
// of the services' ServiceAccounts.
func renderedGrants(t *testing.T, dir string) []grant {
	t.Helper()
	objs, err := renderKustomize(testenv.Get(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	clusterRoles, roles := map[string][]rbacv1.PolicyRule{}, map[string][]rbacv1.PolicyRule{}
	var clusterBindings []rbacv1.ClusterRoleBinding
	var bindings []rbacv1.RoleBinding
	for _, o := range objs {
		var err error
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r)
			clusterRoles[r.Name] = r.Rules
		case "Role":
			var r rbacv1.Role
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r)
			roles[r.Namespace+"/"+r.Name] = r.Rules
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b)
			clusterBindings = append(clusterBindings, b)
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b)
			bindings = append(bindings, b)
		}
		if err != nil {
			t.Fatalf("decode %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	var grants []grant
	add := func(subjects []rbacv1.Subject, rules []rbacv1.PolicyRule, ns string) {
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != deployNamespace {
				t.Fatalf("binding to %s %s/%s: deploy/ binds only its ServiceAccounts in %s", s.Kind, s.Namespace, s.Name, deployNamespace)
			}
			for _, r := range rules {
				names := r.ResourceNames
				if len(names) == 0 {
					names = []string{""}
				}
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						for _, v := range r.Verbs {
							for _, n := range names {
								grants = append(grants, grant{service: s.Name, verb: v, group: g, resource: res, namespace: ns, name: n})
							}
						}
					}
				}
			}
		}
	}
	for _, b := range clusterBindings {
		rules, ok := clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || !ok {
			t.Fatalf("ClusterRoleBinding %s refers to %s %s, which deploy/ does not define", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		add(b.Subjects, rules, "")
	}
	for _, b := range bindings {
		rules, ok := roles[b.Namespace+"/"+b.RoleRef.Name]
		if b.RoleRef.Kind != "Role" || !ok {
			t.Fatalf("RoleBinding %s/%s refers to %s %s, which deploy/ does not define in %s", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name, b.Namespace)
		}
		add(b.Subjects, rules, b.Namespace)
	}
	return grants
}

func grantStrings(gs []grant) []string {
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		out = append(out, g.String())
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestDeployRBACMatchesREADME: the RBAC that deploy/overlays/production
// grants each ServiceAccount is exactly the README's table of what each
// service may do, row for row, so neither can drift from the other.
func TestDeployRBACMatchesREADME(t *testing.T) {
	want := grantStrings(readmeGrants(t))
	got := grantStrings(renderedGrants(t, "deploy/overlays/production"))
	var missing, extra []string
	for _, g := range want {
		if !slices.Contains(got, g) {
			missing = append(missing, g)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Fatalf("deploy/ RBAC and the README's table differ:\nin the README, not granted by deploy/:\n  %s\ngranted by deploy/, not in the README:\n  %s",
			strings.Join(missing, "\n  "), strings.Join(extra, "\n  "))
	}
}

// readmeInstallLines returns the command lines of the README block between
// <!-- install --> and <!-- /install --> (comments dropped).
func readmeInstallLines(t *testing.T) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(readmeBlock(t, "install"), "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, " #"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if strings.HasPrefix(l, "kubectl ") || strings.HasPrefix(l, "for ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// runREADMELine runs one README command line as printed, from the repository
// root, with bin/ first on PATH and KUBECONFIG set to the harness's.
func runREADMELine(t *testing.T, line string) string {
	t.Helper()
	env := testenv.Get(t)
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = env.RootDir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(env.RootDir, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+env.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README line %q: %v\n%s", line, err, out)
	}
	return string(out)
}

// natsRouteSecret holds the password the NATS nodes' routes log in with
// (key password); the README's install line makes it.
const natsRouteSecret = "molt-nats-route"

// deployServiceNames are the services deploy/ installs, one Deployment each.
var deployServiceNames = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg"}

// TestDeploy installs deploy/overlays/production into the control plane with
// the README's commands, as printed, and proves on it:
//   - it is accepted as-is (server-side apply, the namespace enforcing the
//     "restricted" Pod Security Standard), and each Deployment's two pods
//     are scheduled onto the kwok nodes (they run no process there);
//   - RBAC: each service, impersonating its ServiceAccount, is allowed every
//     row of the README's table and refused what it does not need, both as
//     SelfSubjectAccessReviews and as real calls.
//
// It then deletes the Deployments, Services and PodDisruptionBudgets and
// waits for their pods to go; the namespace, ServiceAccounts, RBAC and CRDs
// stay (inert, and what an impersonating stack uses).
func TestDeploy(t *testing.T) {
	env := testenv.Get(t)
	lines := readmeInstallLines(t)
	apply := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "kubectl apply --server-side") })
	if apply < 0 {
		t.Fatal("README install block has no `kubectl apply --server-side` line")
	}
	t.Cleanup(func() { deleteDeployWorkloads(t, env) })
	for _, l := range lines[:apply+1] {
		runREADMELine(t, l)
	}

	t.Run("ScheduledOnKwokNodes", func(t *testing.T) {
		// The harness's controller-manager runs no Deployment or ReplicaSet
		// controller (nothing else needs them): run those two for this test.
		kcm := startWorkloadControllers(t, env)
		defer kcm.Stop(3 * time.Second)
		ctx := context.Background()
		for _, name := range deployServiceNames {
			testenv.Eventually(t, 90*time.Second, "2 pods of "+name+" scheduled onto kwok nodes", func() (bool, error) {
				pods, err := env.Kube.CoreV1().Pods(deployNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
				if err != nil {
					return false, err
				}
				scheduled := 0
				for _, p := range pods.Items {
					if strings.HasPrefix(p.Spec.NodeName, "kwok-node-") && p.DeletionTimestamp == nil {
						scheduled++
					}
				}
				if scheduled != 2 {
					return false, fmt.Errorf("%d of %d pods scheduled; ReplicaSet events: %s", scheduled, len(pods.Items), replicaSetEvents(ctx, env.Kube, name))
				}
				return true, nil
			})
		}
		// The README's lines after the apply (waiting for the Deployments to
		// be Available: kwok marks the pods Ready).
		for _, l := range lines[apply+1:] {
			runREADMELine(t, l)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		testDeployRBAC(t, env)
	})
}

// startWorkloadControllers runs a kube-controller-manager with only the
// Deployment and ReplicaSet controllers, beside the harness's.
func startWorkloadControllers(t *testing.T, env *testenv.Env) *devcluster.Process {
	t.Helper()
	cfg := devcluster.Config{BinDir: filepath.Join(env.RootDir, "bin"), StateDir: t.TempDir()}
	p, err := cfg.Launch("kube-controller-manager-workloads", filepath.Join(cfg.BinDir, "kube-controller-manager"), []string{
		"--kubeconfig=" + env.Kubeconfig,
		"--leader-elect=false",
		"--controllers=deployment-controller,replicaset-controller",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--v=1",
	}, nil)
	if err != nil {
		t.Fatalf("start the Deployment and ReplicaSet controllers (run `make tools`): %v", err)
	}
	return p
}

// replicaSetEvents lists the Warning Events of a service's ReplicaSets (a pod
// the API server refused, Pod Security above all), for a failure message.
func replicaSetEvents(ctx context.Context, kube kubernetes.Interface, name string) string {
	evs, err := kube.CoreV1().Events(deployNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ReplicaSet,type=Warning"})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range evs.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, name+"-") {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	if len(msgs) == 0 {
		return "none"
	}
	return strings.Join(msgs, "; ")
}

// deleteDeployWorkloads deletes what deploy/ runs (Deployments, their
// ReplicaSets and pods, the NATS StatefulSet, its config and NetworkPolicy,
// the NATS Secrets the README's line made, Services, PodDisruptionBudgets)
// and waits until no pod is left in molt-system.
func deleteDeployWorkloads(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &background}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=molt"}
	errs := []error{
		env.Kube.AppsV1().Deployments(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.AppsV1().ReplicaSets(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.PolicyV1().PodDisruptionBudgets(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.CoreV1().Pods(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.AppsV1().StatefulSets(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.CoreV1().ConfigMaps(deployNamespace).DeleteCollection(ctx, opts, sel),
		env.Kube.NetworkingV1().NetworkPolicies(deployNamespace).DeleteCollection(ctx, opts, sel),
		// The one-active-ops policy: the package's other tests start a
		// second ops beside an active one on purpose, to see it wait.
		env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, oneActiveOpsPolicy, opts),
		env.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, oneActiveOpsPolicy, opts),
	}
	for _, user := range devcluster.NATSUsers {
		errs = append(errs, env.Kube.CoreV1().Secrets(deployNamespace).Delete(ctx, "molt-nats-"+user, metav1.DeleteOptions{}))
	}
	errs = append(errs, env.Kube.CoreV1().Secrets(deployNamespace).Delete(ctx, natsRouteSecret, metav1.DeleteOptions{}))
	services, err := env.Kube.CoreV1().Services(deployNamespace).List(ctx, sel)
	errs = append(errs, err)
	if err == nil {
		for _, s := range services.Items {
			errs = append(errs, env.Kube.CoreV1().Services(deployNamespace).Delete(ctx, s.Name, metav1.DeleteOptions{}))
		}
	}
	for _, err := range errs {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete deploy/'s workloads: %v", err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "no pod left in "+deployNamespace, func() (bool, error) {
		pods, err := env.Kube.CoreV1().Pods(deployNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	})
	// The API server drops a deleted policy asynchronously: wait until a
	// second ops beside an active one is admitted again.
	ns := env.Namespace(t)
	agents := versioned.NewForConfigOrDie(env.RestConfig)
	idle := func(name string) *agentsv1alpha1.SandboxUpdateOps {
		return &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: agentsv1alpha1.SandboxUpdateOpsSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"molt.dev/policy-probe": "none"}}, Paused: true}}
	}
	if _, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, idle("policy-probe-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create ops policy-probe-a: %v", err)
		return
	}
	testenv.Eventually(t, 30*time.Second, "the one-active-ops policy is gone", func() (bool, error) {
		_, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, idle("policy-probe-b"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, err
	})
}

// access is one request a service makes or must not make.
type access struct {
	verb, resource, namespace, name string
}

// refusals are, per service, requests it does not need and is refused:
// another stage's writes, and what no service needs at all.
var refusals = map[string][]access{
	"selector": {
		{verb: "update", resource: "sandboxsets/status"}, {verb: "update", resource: "sandboxsets"},
		{verb: "delete", resource: "pods"}, {verb: "update", resource: "sandboxes"}, {verb: "update", resource: "sandboxes/status"},
		{verb: "update", resource: "sandboxupdateops/status"}, {verb: "create", resource: "events"},
		{verb: "update", resource: "leases", namespace: deployNamespace, name: "molt-statusagg"},
	},
	"patcher": {
		{verb: "delete", resource: "sandboxes"},
		{verb: "update", resource: "sandboxes/status"}, {verb: "update", resource: "sandboxes"}, {verb: "list", resource: "sandboxes"},
		{verb: "patch", resource: "sandboxupdateops"}, {verb: "create", resource: "pods"}, {verb: "delete", resource: "pods"},
		{verb: "create", resource: "leases", namespace: deployNamespace},
	},
	"hookrunner": {
		{verb: "delete", resource: "sandboxes"},
		{verb: "delete", resource: "pods"}, {verb: "create", resource: "pods"}, {verb: "create", resource: "pods/exec"},
		{verb: "update", resource: "sandboxes"}, {verb: "patch", resource: "sandboxes"}, {verb: "get", resource: "sandboxupdateops"},
	},
	"podcycler": {
		{verb: "delete", resource: "sandboxes"},
		{verb: "patch", resource: "sandboxupdateops"}, {verb: "update", resource: "sandboxes"},
		{verb: "update", resource: "sandboxes/status"}, {verb: "create", resource: "events"}, {verb: "create", resource: "pods/exec"},
	},
	"statusagg": {
		{verb: "delete", resource: "sandboxes"}, {verb: "create", resource: "sandboxes"}, {verb: "update", resource: "sandboxsets"},
		{verb: "create", resource: "pods"}, {verb: "delete", resource: "pods"}, {verb: "patch", resource: "sandboxes"},
		{verb: "update", resource: "sandboxes"}, {verb: "patch", resource: "sandboxupdateops"},
		{verb: "update", resource: "leases", namespace: deployNamespace, name: "molt-selector"},
	},
}

// refusedOfAll are refused to every service.
var refusedOfAll = []access{
	{verb: "list", resource: "secrets"}, {verb: "get", resource: "secrets", namespace: deployNamespace},
	{verb: "create", resource: "sandboxupdateops"},
	{verb: "create", resource: "leases", namespace: "kube-system"},
}

// testDeployRBAC proves the applied RBAC with each service impersonating its
// ServiceAccount: every README row allowed, every refusal refused (as
// SelfSubjectAccessReviews, in a namespace of the test's own for what is
// granted in all namespaces), and one real call of each kind either way.
func testDeployRBAC(t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	grants := readmeGrants(t)
	dir := t.TempDir()
	for _, service := range deployServiceNames {
		t.Run(service, func(t *testing.T) {
			kubeconfig, err := impersonatingKubeconfig(env, dir, service)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			kube := kubernetes.NewForConfigOrDie(cfg)
			var allowed, refused []access
			for _, g := range grants {
				if g.service != service {
					continue
				}
				where := g.namespace
				if where == "" {
					where = ns
				}
				allowed = append(allowed, access{verb: g.verb, resource: g.resource, namespace: where, name: g.name})
			}
			if len(allowed) == 0 {
				t.Fatalf("the README grants %s nothing", service)
			}
			for _, a := range append(slices.Clone(refusals[service]), refusedOfAll...) {
				if a.namespace == "" {
					a.namespace = ns
				}
				refused = append(refused, a)
			}
			for _, a := range allowed {
				if ok, reason := selfAccess(t, kube, a); !ok {
					t.Errorf("%s is refused %s, which the README grants it (%s)", service, a, reason)
				}
			}
			for _, a := range refused {
				if ok, reason := selfAccess(t, kube, a); ok {
					t.Errorf("%s is allowed %s, which it does not need (%s)", service, a, reason)
				}
			}
			// A namespace per service: each makes its calls on an ops of
			// its own, and deploy/admission allows one active ops per
			// namespace.
			realCalls(t, env, cfg, service, env.Namespace(t))
		})
	}
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.name != "" {
		s += " " + a.name
	}
	return s + " in " + a.namespace
}

// selfAccess asks the API server, as the impersonated service, whether it may
// make request a.
func selfAccess(t *testing.T, kube kubernetes.Interface, a access) (bool, string) {
	t.Helper()
	resource, sub, _ := strings.Cut(a.resource, "/")
	group, ok := groupOf[resource]
	if !ok {
		t.Fatalf("no API group known for %q", resource)
	}
	review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.namespace, Verb: a.verb, Group: group, Resource: resource, Subresource: sub, Name: a.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectAccessReview %s: %v", a, err)
	}
	return review.Status.Allowed, review.Status.Reason
}

// realCalls makes, as service, one call it needs (which must succeed) and
// one it must be refused (Forbidden), on real objects in ns.
func realCalls(t *testing.T, env *testenv.Env, cfg *rest.Config, service, ns string) {
	t.Helper()
	ctx := context.Background()
	admin := versioned.NewForConfigOrDie(env.RestConfig)
	kube := kubernetes.NewForConfigOrDie(cfg)
	agents := versioned.NewForConfigOrDie(cfg)

	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "rbac-" + service, Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "example.com/rbac:v1"}}}}
	sb, err := admin.AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-pod-" + service, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/rbac:v1"}}},
	}
	if pod, err = env.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-" + service, Namespace: ns},
		Spec: agentsv1alpha1.SandboxUpdateOpsSpec{
			// Selects nothing, and paused: a running stack leaves it alone.
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"molt.dev/rbac-test": "none"}},
			Paused:   true,
		},
	}
	if _, err := admin.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, ops, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create SandboxUpdateOps: %v", err)
	}
	annotate := []byte(`{"metadata":{"annotations":{"molt.dev/rbac-test":"` + service + `"}}}`)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	var allowed, refused error
	var allowedWhat, refusedWhat string
	switch service {
	case "selector":
		allowedWhat, refusedWhat = "dry-run create a pod", "delete a pod"
		probe := pod.DeepCopy()
		probe.ResourceVersion, probe.UID, probe.Name, probe.GenerateName = "", "", "", pod.Name+"-"
		_, allowed = kube.CoreV1().Pods(ns).Create(ctx, probe, dryRun)
		refused = kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	case "patcher":
		allowedWhat, refusedWhat = "patch a sandbox's spec (a JSON patch testing its generation)", "update a sandbox's status"
		spec := fmt.Sprintf(`[{"op":"test","path":"/metadata/generation","value":%d},{"op":"add","path":"/spec/template/spec/containers/0/image","value":"example.com/rbac:v2"}]`, sb.Generation)
		_, allowed = agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, types.JSONPatchType, []byte(spec), metav1.PatchOptions{})
		refused = updateSandbox(ctx, agents, ns, sb.Name, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Message = "written by patcher" }, true)
	case "hookrunner":
		allowedWhat, refusedWhat = "patch a pod (the done mark)", "delete a pod"
		_, allowed = kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, annotate, metav1.PatchOptions{})
		refused = kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	case "podcycler":
		allowedWhat, refusedWhat = "patch a sandbox (the access token)", "patch a SandboxUpdateOps"
		_, allowed = agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, types.MergePatchType, annotate, metav1.PatchOptions{})
		_, refused = agents.AgentsV1alpha1().SandboxUpdateOps(ns).Patch(ctx, ops.Name, types.MergePatchType, annotate, metav1.PatchOptions{})
	case "statusagg":
		allowedWhat, refusedWhat = "patch a sandbox's status (a JSON patch)", "create a pod"
		status := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":"add","path":"/status","value":{"message":"written by statusagg"}}]`, sb.UID)
		_, allowed = agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, types.JSONPatchType, []byte(status), metav1.PatchOptions{}, "status")
		probe := pod.DeepCopy()
		probe.ResourceVersion, probe.UID, probe.Name = "", "", pod.Name+"-2"
		_, refused = kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{})
	default:
		t.Fatalf("no real calls for %s", service)
	}
	if allowed != nil {
		t.Errorf("%s may %s, but the API server said: %v", service, allowedWhat, allowed)
	}
	// What RBAC grants beyond the need, deploy/admission's
	// molt-service-pod-writes refuses: a real pod create by the selector,
	// a hookrunner write of anything but a pod's annotations.
	var beyond func() error
	switch service {
	case "selector":
		beyond = func() error {
			probe := pod.DeepCopy()
			probe.ResourceVersion, probe.UID, probe.Name, probe.GenerateName = "", "", "", pod.Name+"-"
			_, err := kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{})
			return err
		}
	case "hookrunner":
		beyond = func() error {
			image := []byte(`{"spec":{"containers":[{"name":"c","image":"example.com/rbac:v2"}]}}`)
			_, err := kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, image, metav1.PatchOptions{})
			return err
		}
	}
	if beyond != nil {
		testenv.Eventually(t, 30*time.Second, service+"'s write beyond its need is refused by molt-service-pod-writes", func() (bool, error) {
			err := beyond()
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "molt-service-pod-writes"), err
		})
	}
	if !apierrors.IsForbidden(refused) {
		t.Errorf("%s must not %s, but the API server answered %v, not Forbidden", service, refusedWhat, refused)
	} else {
		t.Logf("%s: %s refused: %v", service, refusedWhat, refused)
	}
}

// updateSandbox reads a sandbox, changes it and writes it back (its status
// when status is true), retrying a conflict with a running stack's writes.
func updateSandbox(ctx context.Context, agents versioned.Interface, ns, name string, change func(*agentsv1alpha1.Sandbox), status bool) error {
	var err error
	for range 5 {
		var sb *agentsv1alpha1.Sandbox
		if sb, err = agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		change(sb)
		if status {
			_, err = agents.AgentsV1alpha1().Sandboxes(ns).UpdateStatus(ctx, sb, metav1.UpdateOptions{})
		} else {
			_, err = agents.AgentsV1alpha1().Sandboxes(ns).Update(ctx, sb, metav1.UpdateOptions{})
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// TestDeployManifests: what every overlay runs, checked on kustomize's
// output: per service a Deployment under its own ServiceAccount (2 replicas
// in production, 1 in dev) with the image the overlay sets, hardened (non-root,
// read-only root, no capabilities, no privilege escalation, RuntimeDefault
// seccomp), probed on /healthz and /readyz, with requests and limits, leader
// election in its own namespace where the service elects one, the optional
// NATS credentials Secret; a metrics Service and a PodDisruptionBudget that
// select its pods; and the NATS cluster of deploy/nats, which both install.
func TestDeployManifests(t *testing.T) {
	env := testenv.Get(t)
	for _, tc := range []struct {
		overlay  string
		replicas int32
		image    string // fmt pattern of a service's image
		natsPull corev1.PullPolicy
	}{
		{overlay: "deploy/overlays/production", replicas: 2, image: "registry.example.com/molt/%s:v0.1.0"},
		// kind runs the images it was given (kind load docker-image), never pulled.
		{overlay: "deploy/overlays/dev", replicas: 1, image: "molt/%s:dev", natsPull: corev1.PullNever},
	} {
		t.Run(filepath.Base(tc.overlay), func(t *testing.T) {
			objs, err := renderKustomize(env, tc.overlay)
			if err != nil {
				t.Fatal(err)
			}
			byKind := map[string]map[string]*unstructured.Unstructured{}
			for _, o := range objs {
				if byKind[o.GetKind()] == nil {
					byKind[o.GetKind()] = map[string]*unstructured.Unstructured{}
				}
				byKind[o.GetKind()][o.GetName()] = o
			}
			for _, name := range deployServiceNames {
				t.Run(name, func(t *testing.T) {
					checkDeployment(t, byKind, name, tc.replicas, fmt.Sprintf(tc.image, name))
				})
			}
			t.Run("nats", func(t *testing.T) { checkNATS(t, byKind, fmt.Sprintf(tc.image, "nats-server"), tc.natsPull) })
		})
	}
}

func checkDeployment(t *testing.T, byKind map[string]map[string]*unstructured.Unstructured, name string, replicas int32, image string) {
	t.Helper()
	var d appsv1.Deployment
	u, ok := byKind["Deployment"][name]
	if !ok {
		t.Fatalf("no Deployment %s", name)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	pod, want := d.Spec.Template.Spec, labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	if d.Namespace != deployNamespace || d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("Deployment %s/%s with %v replicas, want %s with %d", d.Namespace, d.Name, d.Spec.Replicas, deployNamespace, replicas)
	}
	if !want.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the selector %s does not select the pod template's labels %v", want, d.Spec.Template.Labels)
	}
	if pod.ServiceAccountName != name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, name)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != image {
		t.Errorf("image %q, want %q", c.Image, image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, capabilities drop ALL", sc)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("probe %+v, want GET %s on port http", probe, path)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if c.Resources.Requests.Name(r, "").IsZero() || c.Resources.Limits.Name(r, "").IsZero() {
			t.Errorf("no %s request or limit: %+v", r, c.Resources)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	_, elects := map[string]bool{"selector": true, "statusagg": true}[name]
	if elects {
		ns := env["MOLT_LEADER_ELECTION_NAMESPACE"].ValueFrom
		if env["MOLT_LEADER_ELECT"].Value != "true" || ns == nil || ns.FieldRef == nil || ns.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("leader election: MOLT_LEADER_ELECT=%q, MOLT_LEADER_ELECTION_NAMESPACE from %+v; want true and the pod's namespace", env["MOLT_LEADER_ELECT"].Value, ns)
		}
	}
	if !strings.HasPrefix(env["MOLT_HTTP_ADDR"].Value, ":") || env["MOLT_NATS_URL"].Value == "" {
		t.Errorf("MOLT_HTTP_ADDR %q (want all interfaces, \":port\"), MOLT_NATS_URL %q", env["MOLT_HTTP_ADDR"].Value, env["MOLT_NATS_URL"].Value)
	}
	// Both overlays run deploy/nats's three nodes: the stream keeps a copy on each.
	if got := env["MOLT_STREAM_REPLICAS"].Value; got != "3" {
		t.Errorf("MOLT_STREAM_REPLICAS %q, want 3 (one copy of the event stream on each of the three NATS nodes)", got)
	}
	secret := false
	for _, v := range pod.Volumes {
		if s := v.Secret; s != nil && s.SecretName == "molt-nats-"+name && (s.Optional == nil || !*s.Optional) {
			secret = true
		}
	}
	if !secret {
		t.Errorf("no volume of the Secret molt-nats-%s (required: without its password the service cannot log in)", name)
	}
	if env["MOLT_NATS_USER"].Value != name || env["MOLT_NATS_PASSWORD_FILE"].Value != "/etc/molt/nats/password" {
		t.Errorf("MOLT_NATS_USER %q, MOLT_NATS_PASSWORD_FILE %q; want %q and /etc/molt/nats/password", env["MOLT_NATS_USER"].Value, env["MOLT_NATS_PASSWORD_FILE"].Value, name)
	}

	var svc corev1.Service
	if u, ok := byKind["Service"][name+"-metrics"]; !ok {
		t.Errorf("no Service %s-metrics", name)
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &svc); err != nil {
		t.Fatal(err)
	} else if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service %s-metrics selects %v on %+v; want the pods' port http", name, svc.Spec.Selector, svc.Spec.Ports)
	}
	var pdb policyv1.PodDisruptionBudget
	if u, ok := byKind["PodDisruptionBudget"][name]; !ok {
		t.Errorf("no PodDisruptionBudget %s", name)
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pdb); err != nil {
		t.Fatal(err)
	} else if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget %s selects %v, not the Deployment's pods", name, pdb.Spec.Selector)
	}
}

// checkNATS checks deploy/nats as the production overlay renders it: a
// 3-node StatefulSet on PersistentVolumes, hardened like the services, run
// from the ConfigMap holding nats.conf, auth.conf and the (empty) TLS
// includes, reading every user's password from that user's Secret and the
// routes' from molt-nats-route; a headless Service for the routes; a
// NetworkPolicy that lets no pod reach the monitoring port.
func checkNATS(t *testing.T, byKind map[string]map[string]*unstructured.Unstructured, image string, pull corev1.PullPolicy) {
	t.Helper()
	var ss appsv1.StatefulSet
	u, ok := byKind["StatefulSet"]["nats"]
	if !ok {
		t.Fatal("no StatefulSet nats")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ss); err != nil {
		t.Fatal(err)
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 || ss.Spec.ServiceName != "nats" || len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("StatefulSet nats: replicas %v, serviceName %q, %d volume claim templates; want 3, nats, 1", ss.Spec.Replicas, ss.Spec.ServiceName, len(ss.Spec.VolumeClaimTemplates))
	}
	pod := ss.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != image || c.ImagePullPolicy != pull {
		t.Errorf("image %q, pull policy %q; want %q, %q", c.Image, c.ImagePullPolicy, image, pull)
	}
	sc := c.SecurityContext
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("not hardened: pod %+v, container %+v", pod.SecurityContext, sc)
	}
	secretOf := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretOf[e.Name] = e.ValueFrom.SecretKeyRef.Name
		}
	}
	for _, user := range devcluster.NATSUsers {
		if got := secretOf[devcluster.NATSPasswordEnv(user)]; got != "molt-nats-"+user {
			t.Errorf("%s from Secret %q, want molt-nats-%s", devcluster.NATSPasswordEnv(user), got, user)
		}
	}
	// The routes log in (nats.conf's cluster authorization): the password
	// from the Secret molt-nats-route, in every route URL.
	if got := secretOf["NATS_ROUTE_PASSWORD"]; got != natsRouteSecret {
		t.Errorf("NATS_ROUTE_PASSWORD from Secret %q, want %s", got, natsRouteSecret)
	}
	for _, e := range c.Env {
		if e.Name == "NATS_ROUTES" && strings.Count(e.Value, "nats-route://route:$(NATS_ROUTE_PASSWORD)@") != 3 {
			t.Errorf("NATS_ROUTES %q: want 3 routes, each logging in as route with $(NATS_ROUTE_PASSWORD)", e.Value)
		}
	}
	var cm *unstructured.Unstructured
	for name, o := range byKind["ConfigMap"] {
		if strings.HasPrefix(name, "nats-config") {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap nats-config")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if !strings.Contains(data["nats.conf"], "include ./auth.conf") || !strings.Contains(data["auth.conf"], "MOLT_NATS_PASSWORD_PODCYCLER") {
		t.Errorf("ConfigMap %s does not hold nats.conf including auth.conf", cm.GetName())
	}
	for _, f := range []string{"client-tls.conf", "route-tls.conf"} {
		if _, ok := data[f]; !ok || !strings.Contains(data["nats.conf"], "include ./"+f) {
			t.Errorf("ConfigMap %s does not hold %s, which nats.conf includes", cm.GetName(), f)
		}
	}
	if np, ok := byKind["NetworkPolicy"]["nats"]; !ok {
		t.Error("no NetworkPolicy nats")
	} else if ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress"); strings.Contains(fmt.Sprint(ingress), "8222") {
		t.Errorf("NetworkPolicy nats lets pods reach the monitoring port 8222: %v", ingress)
	}
	if svc, ok := byKind["Service"]["nats"]; !ok {
		t.Error("no Service nats")
	} else if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip != "None" {
		t.Errorf("Service nats has clusterIP %q, want None (headless, for the routes)", ip)
	}
}

// TestDeployIntoAnotherNamespace: the README's overlay for another
// namespace, rendered as printed, moves all of molt there. The bindings grant
// the ServiceAccounts of that namespace, the services and NATS nodes reach
// NATS by names in it ($(POD_NAMESPACE), defined before its use), and the
// admission policy matches that namespace's selector and hookrunner: nothing
// names molt-system any more.
func TestDeployIntoAnotherNamespace(t *testing.T) {
	env := testenv.Get(t)
	block := readmeBlock(t, "another-namespace")
	start, end := strings.Index(block, "```yaml\n"), strings.LastIndex(block, "```")
	if start < 0 || end <= start {
		t.Fatalf("README's another-namespace block has no yaml code block: %q", block)
	}
	overlay := block[start+len("```yaml\n") : end]
	var k struct {
		Namespace string `json:"namespace"`
	}
	if err := utilyaml.Unmarshal([]byte(overlay), &k); err != nil || k.Namespace == "" || k.Namespace == deployNamespace {
		t.Fatalf("README's overlay for another namespace sets namespace %q (%v), want one other than %s", k.Namespace, err, deployNamespace)
	}
	ns := k.Namespace
	// Beside production, as the README says; the render sees it only there.
	dir, err := os.MkdirTemp(filepath.Join(env.RootDir, "deploy", "overlays"), "ns-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(env.RootDir, dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderKustomize(env, rel)
	if err != nil {
		t.Fatal(err)
	}
	policies := 0
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		if o.GetNamespace() != "" && o.GetNamespace() != ns {
			t.Errorf("%s is in namespace %s, want %s", what, o.GetNamespace(), ns)
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if m, ok := s.(map[string]any); ok && m["namespace"] != ns {
				t.Errorf("%s grants %v, want the ServiceAccount in %s", what, m, ns)
			}
		}
		raw, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), deployNamespace) {
			t.Errorf("%s still names %s: %s", what, deployNamespace, raw)
		}
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == "molt-service-pod-writes" {
			policies++
			for _, sa := range []string{"selector", "hookrunner"} {
				if user := "system:serviceaccount:" + ns + ":" + sa; strings.Count(string(raw), user) != 2 {
					t.Errorf("%s names %s %d times, want 2 (its match condition and its validation): %s", what, user, strings.Count(string(raw), user), raw)
				}
			}
		}
		for _, c := range containersOf(o) {
			defined := map[string]bool{}
			for _, e := range c.Env {
				for _, ref := range envRef.FindAllStringSubmatch(e.Value, -1) {
					if !defined[ref[1]] {
						t.Errorf("%s: env %s uses $(%s) before it is defined: the kubelet would leave it as written", what, e.Name, ref[1])
					}
				}
				defined[e.Name] = true
			}
		}
	}
	if policies != 1 {
		t.Errorf("%d ValidatingAdmissionPolicy molt-service-pod-writes rendered, want 1", policies)
	}
}

// envRef matches a $(VAR) reference the kubelet expands in an env value.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containersOf returns the containers of a Deployment's or StatefulSet's pod
// template, none for other kinds.
func containersOf(o *unstructured.Unstructured) []corev1.Container {
	var tmpl corev1.PodTemplateSpec
	raw, ok, _ := unstructured.NestedMap(o.Object, "spec", "template")
	if !ok || (o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet") {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
		return nil
	}
	return tmpl.Spec.Containers
}
