package selector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// member is a pool member named name on revision, in phase.
func member(name, revision string, phase agentsv1alpha1.SandboxPhase) *agentsv1alpha1.Sandbox {
	return &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{agentsv1alpha1.LabelTemplateHash: revision}},
		Status:     agentsv1alpha1.SandboxStatus{Phase: phase},
	}
}

// members is n members named prefix-0... on revision, in phase.
func members(prefix string, n int, revision string, phase agentsv1alpha1.SandboxPhase) []*agentsv1alpha1.Sandbox {
	var out []*agentsv1alpha1.Sandbox
	for i := range n {
		out = append(out, member(fmt.Sprintf("%s-%d", prefix, i), revision, phase))
	}
	return out
}

func names(sbs []*agentsv1alpha1.Sandbox) []string {
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.Name)
	}
	return out
}

const (
	running = agentsv1alpha1.SandboxRunning
	pending = agentsv1alpha1.SandboxPending
)

func TestPlanPool(t *testing.T) {
	tests := []struct {
		name         string
		live         []*agentsv1alpha1.Sandbox
		limits       poolLimits
		wantOutdated []string
		wantSurplus  []string
		wantCreate   int
	}{
		{
			name:         "template change accepted: replaces up to maxUnavailable",
			live:         members("old", 4, "r1", running),
			limits:       poolLimits{replicas: 4, maxUnavailable: 2},
			wantOutdated: []string{"old-0", "old-1"},
			wantCreate:   2,
		},
		{
			name:   "template change refused: deletes nothing outdated, creates nothing",
			live:   members("old", 4, "r1", running),
			limits: poolLimits{replicas: 4, maxUnavailable: 2, templateRefused: true},
		},
		{
			name:   "refused, an outdated member unavailable: it is kept too",
			live:   append(members("old", 3, "r1", running), member("stuck", "r1", pending)),
			limits: poolLimits{replicas: 4, maxUnavailable: 2, templateRefused: true},
		},
		{
			name:   "refused, members missing: creates nothing",
			live:   members("new", 2, "r2", running),
			limits: poolLimits{replicas: 5, maxUnavailable: 1, templateRefused: true},
		},
		{
			name:        "refused, scaled down: the surplus still goes",
			live:        members("old", 4, "r1", running),
			limits:      poolLimits{replicas: 1, maxUnavailable: 1, templateRefused: true},
			wantSurplus: []string{"old-0", "old-1", "old-2"},
		},
		{
			name:       "scale up unlimited: creates every missing member",
			live:       nil,
			limits:     poolLimits{replicas: 1000, maxUnavailable: 200},
			wantCreate: 1000,
		},
		{
			name:       "scale up limited: at most scaleStrategy.maxUnavailable",
			live:       nil,
			limits:     poolLimits{replicas: 1000, maxUnavailable: 200, maxCreating: 50, creatingLimited: true},
			wantCreate: 50,
		},
		{
			name:       "members not yet available use up the scale budget",
			live:       append(members("up", 100, "r2", running), members("creating", 30, "r2", pending)...),
			limits:     poolLimits{replicas: 1000, maxUnavailable: 200, maxCreating: 50, creatingLimited: true},
			wantCreate: 20,
		},
		{
			name:       "scale budget used up: creates nothing until one becomes available",
			live:       members("creating", 60, "r2", pending),
			limits:     poolLimits{replicas: 1000, maxUnavailable: 200, maxCreating: 50, creatingLimited: true},
			wantCreate: 0,
		},
		{
			name:       "scale budget above what is missing: creates what is missing",
			live:       members("up", 8, "r2", running),
			limits:     poolLimits{replicas: 10, maxUnavailable: 2, maxCreating: 5, creatingLimited: true},
			wantCreate: 2,
		},
		{
			name:         "rolling update paced by the scale budget as well",
			live:         members("old", 10, "r1", running),
			limits:       poolLimits{replicas: 10, maxUnavailable: 4, maxCreating: 1, creatingLimited: true},
			wantOutdated: []string{"old-0", "old-1", "old-2", "old-3"},
			wantCreate:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := names(tt.live)
			plan := planPool(tt.live, "r2", tt.limits)
			if got := names(plan.outdated); !slices.Equal(got, tt.wantOutdated) {
				t.Errorf("outdated to delete %v, want %v", got, tt.wantOutdated)
			}
			if got := names(plan.surplus); !slices.Equal(got, tt.wantSurplus) {
				t.Errorf("surplus to delete %v, want %v", got, tt.wantSurplus)
			}
			if plan.create != tt.wantCreate {
				t.Errorf("create %d, want %d", plan.create, tt.wantCreate)
			}
			if tt.limits.templateRefused && plan.needsTemplate() {
				t.Errorf("a refused template's plan replaces %v or creates %d", names(plan.outdated), plan.create)
			}
			if !slices.Equal(names(tt.live), before) {
				t.Errorf("planPool reordered its input: %v, was %v", names(tt.live), before)
			}
		})
	}
}

func TestPoolLimitsFromSpec(t *testing.T) {
	ptr := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	tests := []struct {
		name             string
		replicas         int32
		update, scale    *intstr.IntOrString
		wantUnavailable  int
		wantCreating     int
		wantLimitedScale bool
	}{
		{name: "defaults: 20% rounded up, scale not limited", replicas: 10, wantUnavailable: 2},
		{name: "default of 1 is 1", replicas: 1, wantUnavailable: 1},
		{name: "default of 0 is 1", replicas: 0, wantUnavailable: 1},
		{name: "percentages round up", replicas: 1000, update: ptr(intstr.FromString("1%")), scale: ptr(intstr.FromString("5%")),
			wantUnavailable: 10, wantCreating: 50, wantLimitedScale: true},
		{name: "integers, zero raised to 1", replicas: 10, update: ptr(intstr.FromInt32(0)), scale: ptr(intstr.FromInt32(0)),
			wantUnavailable: 1, wantCreating: 1, wantLimitedScale: true},
		{name: "a value the CRD refuses paces at 1", replicas: 10, update: ptr(intstr.FromString("half")), scale: ptr(intstr.FromString("half")),
			wantUnavailable: 1, wantCreating: 1, wantLimitedScale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &agentsv1alpha1.SandboxSet{Spec: agentsv1alpha1.SandboxSetSpec{
				Replicas:       tt.replicas,
				UpdateStrategy: agentsv1alpha1.SandboxSetUpdateStrategy{MaxUnavailable: tt.update},
				ScaleStrategy:  agentsv1alpha1.SandboxSetScaleStrategy{MaxUnavailable: tt.scale},
			}}
			if got := PoolMaxUnavailable(set); got != tt.wantUnavailable {
				t.Errorf("PoolMaxUnavailable = %d, want %d", got, tt.wantUnavailable)
			}
			n, limited := poolScaleLimit(set)
			if n != tt.wantCreating || limited != tt.wantLimitedScale {
				t.Errorf("poolScaleLimit = %d, %v; want %d, %v", n, limited, tt.wantCreating, tt.wantLimitedScale)
			}
		})
	}
}

// checkPool is a pool with a stubbed dry run that answers with refuse (an
// error when transient is set) and counts its calls, and the delays it
// asked to sync again after.
type checkPool struct {
	*pool
	dryRuns   int
	refuse    string
	transient error
	records   []string // the template check values recorded on the set
	others    []string // the other annotations recorded on the set, key=value
	requeues  []time.Duration
}

func newCheckPool() *checkPool {
	c := &checkPool{}
	c.pool = &pool{
		// The record lands on the set as the cache would show it next.
		record: func(_ context.Context, set *agentsv1alpha1.SandboxSet, key, value string) error {
			if key == upgrade.AnnotationTemplateCheck {
				c.records = append(c.records, value)
			} else {
				c.others = append(c.others, key+"="+value)
			}
			if value == "" {
				delete(set.Annotations, key)
				return nil
			}
			if set.Annotations == nil {
				set.Annotations = map[string]string{}
			}
			set.Annotations[key] = value
			return nil
		},
		checks:       map[string]templateCheck{},
		expect:       map[string]*expectation{},
		enqueueAfter: func(_ string, d time.Duration) { c.requeues = append(c.requeues, d) },
		dryRun: func(_ context.Context, pod *corev1.Pod) (string, error) {
			c.dryRuns++
			if pod.Namespace != "team-a" || pod.Name != "warm" {
				return "", fmt.Errorf("dry run of pod %s/%s, want team-a/warm", pod.Namespace, pod.Name)
			}
			return c.refuse, c.transient
		},
	}
	return c
}

// event returns the next template check value recorded on the set, "" when
// none was.
func (c *checkPool) event() string {
	if len(c.records) == 0 {
		return ""
	}
	e := c.records[0]
	c.records = c.records[1:]
	return e
}

func warmSet(uid types.UID, image string) *agentsv1alpha1.SandboxSet {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "warm", UID: uid}}
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	return set
}

func TestTemplateCheckedOncePerRevision(t *testing.T) {
	ctx := context.Background()
	c := newCheckPool()
	t0 := time.Now()
	set := warmSet("uid-1", "registry.example/agent:v2")
	for i, now := range []time.Time{t0, t0.Add(time.Second), t0.Add(time.Hour)} {
		refused, err := c.templateRefused(ctx, set, "r2", nil, now)
		if err != nil || refused != "" {
			t.Fatalf("check %d: refused %q, err %v; want accepted", i, refused, err)
		}
	}
	if c.dryRuns != 1 {
		t.Errorf("%d dry runs for one revision, want 1", c.dryRuns)
	}
	if ev := c.event(); ev != "" {
		t.Errorf("an accepted template recorded %q", ev)
	}
	// Another revision, or the set re-created under its name: asked again.
	if _, err := c.templateRefused(ctx, set, "r3", nil, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.templateRefused(ctx, warmSet("uid-2", "registry.example/agent:v2"), "r3", nil, t0); err != nil {
		t.Fatal(err)
	}
	if c.dryRuns != 3 {
		t.Errorf("%d dry runs after a new revision and a new set, want 3", c.dryRuns)
	}
}

func TestTemplateRefusedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	c := newCheckPool()
	c.refuse = `pods "warm-" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10`
	t0 := time.Now()
	set := warmSet("uid-1", "registry.example/agent:v2")

	refused, err := c.templateRefused(ctx, set, "r2", nil, t0)
	if err != nil || refused != c.refuse {
		t.Fatalf("refused %q, err %v; want the API server's words", refused, err)
	}
	ev := c.event()
	for _, want := range []string{"r2 SandboxSet team-a/warm", "revision r2", "exceeded quota", "ResourceQuota is full", "kubectl describe resourcequota -n team-a"} {
		if !strings.Contains(ev, want) {
			t.Errorf("recorded %q lacks %q", ev, want)
		}
	}
	if !slices.Equal(c.requeues, []time.Duration{templateRecheck}) {
		t.Errorf("synced again after %v, want [%v]", c.requeues, templateRecheck)
	}

	// Within templateRecheck the refusal stands: no dry run, no new Event.
	if refused, _ := c.templateRefused(ctx, set, "r2", nil, t0.Add(templateRecheck-time.Second)); refused == "" {
		t.Error("the refusal did not stand within templateRecheck")
	}
	if c.dryRuns != 1 || c.event() != "" {
		t.Errorf("%d dry runs and a record within templateRecheck, want 1 and none", c.dryRuns)
	}

	// The quota was raised: the next check accepts.
	c.refuse = ""
	refused, err = c.templateRefused(ctx, set, "r2", nil, t0.Add(templateRecheck))
	if err != nil || refused != "" || c.dryRuns != 2 {
		t.Errorf("after templateRecheck: refused %q, err %v, %d dry runs; want accepted after a second dry run", refused, err, c.dryRuns)
	}
	if rec, ok := set.Annotations[upgrade.AnnotationTemplateCheck]; ok || len(c.records) != 1 || c.records[0] != "" {
		t.Errorf("accepted: the refusal is still recorded (%q), records %q", rec, c.records)
	}
}

func TestTemplateImageTheKubeletCannotParse(t *testing.T) {
	c := newCheckPool()
	refused, err := c.templateRefused(context.Background(), warmSet("uid-1", "My-Registry/Agent:V2"), "r2", nil, time.Now())
	if err != nil || !strings.Contains(refused, "My-Registry/Agent:V2") {
		t.Fatalf("refused %q, err %v; want the image named", refused, err)
	}
	if c.dryRuns != 0 {
		t.Errorf("%d dry runs, want none: the API server accepts such an image", c.dryRuns)
	}
	if ev := c.event(); !strings.HasPrefix(ev, "r2 ") || !strings.Contains(ev, "My-Registry/Agent:V2") {
		t.Errorf("recorded %q, want the refusal of revision r2 naming the image", ev)
	}
}

func TestTemplateCheckTransientErrorKeepsNoVerdict(t *testing.T) {
	ctx := context.Background()
	c := newCheckPool()
	c.transient = errors.New("connection refused")
	set := warmSet("uid-1", "registry.example/agent:v2")
	if _, err := c.templateRefused(ctx, set, "r2", nil, time.Now()); err == nil || !strings.Contains(err.Error(), "team-a/warm") {
		t.Fatalf("err %v, want one naming the set", err)
	}
	if ev := c.event(); ev != "" {
		t.Errorf("a transient error recorded %q", ev)
	}
	c.transient = nil
	if refused, err := c.templateRefused(ctx, set, "r2", nil, time.Now()); err != nil || refused != "" || c.dryRuns != 2 {
		t.Errorf("retry: refused %q, err %v, %d dry runs; want accepted after a second dry run", refused, err, c.dryRuns)
	}
}

// TestSyncForgetsADeletedSet: a set gone, or being deleted, leaves no
// expectations behind, so one re-created under its name does not wait for
// its predecessor's writes.
func TestSyncForgetsADeletedSet(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		sets []*agentsv1alpha1.SandboxSet
	}{
		{name: "not found"},
		{name: "being deleted", sets: []*agentsv1alpha1.SandboxSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "warm", DeletionTimestamp: &now, Finalizers: []string{"f"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, s := range tt.sets {
				if err := indexer.Add(s); err != nil {
					t.Fatal(err)
				}
			}
			c := newCheckPool()
			c.sets = listers.NewSandboxSetLister(indexer)
			c.sandboxes = listers.NewSandboxLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
			c.expect["team-a/warm"] = &expectation{created: []string{"warm-abcde"}, deadline: time.Now().Add(expectWait)}
			c.checks["team-a/warm"] = templateCheck{uid: "uid-1", revision: "r2"}
			if err := c.sync(context.Background(), "team-a/warm"); err != nil {
				t.Fatal(err)
			}
			if e, ok := c.expect["team-a/warm"]; ok {
				t.Errorf("expectations kept: %+v", e)
			}
			if _, ok := c.checks["team-a/warm"]; ok {
				t.Error("template verdict kept")
			}
		})
	}
}

// TestSyncWithoutTemplateTouchesNothing: a set with only spec.templateRef
// (no inline spec.template, which is all molt builds members from) has no
// revision: its members are not replaced, scaled away or refilled, not even
// a dead one removed; statusagg shows why (TemplateRefused, NoTemplate).
func TestSyncWithoutTemplateTouchesNothing(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "warm", UID: "uid-1"}}
	set.Spec.Replicas = 1
	set.Spec.TemplateRef = &agentsv1alpha1.SandboxTemplateRef{Name: "agent"}
	sets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	sandboxes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := sets.Add(set); err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{set}
	for _, sb := range append(members("warm-old", 3, "r1", running), member("warm-dead", "r1", agentsv1alpha1.SandboxFailed)) {
		sb.Namespace = "team-a"
		sb.Labels[agentsv1alpha1.LabelSandboxPool] = set.Name
		sb.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
		if err := sandboxes.Add(sb); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, sb)
	}
	c := newCheckPool()
	client := fake.NewSimpleClientset(objs...)
	c.client = client
	c.sets = listers.NewSandboxSetLister(sets)
	c.sandboxes = listers.NewSandboxLister(sandboxes)
	if err := c.sync(context.Background(), "team-a/warm"); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && a.GetResource().Resource == "sandboxsets" &&
			string(p.GetPatch()) == `{"metadata":{"finalizers":["`+agentsv1alpha1.FinalizerSandboxSetProtection+`"]}}` {
			continue // the set's finalizer protects claimed sandboxes all the same
		}
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("the pool wrote %s %s of a set without spec.template", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if c.dryRuns != 0 || len(c.records)+len(c.others) != 0 {
		t.Errorf("%d dry runs, records %q %q; want none", c.dryRuns, c.records, c.others)
	}
}

// TestMemberUpdateSyncsItsSet: a member's status change (it became
// available) enqueues its set, so a pool whose creates are capped by
// scaleStrategy.maxUnavailable goes on growing.
func TestMemberUpdateSyncsItsSet(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	old := member("warm-abcde", "r2", pending)
	old.Namespace = "team-a"
	old.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
	cur := old.DeepCopy()
	cur.Status.Phase = running
	var keys []string
	poolHandler(func(key string) { keys = append(keys, key) }).OnUpdate(old, cur)
	if !slices.Contains(keys, "team-a/warm") {
		t.Errorf("enqueued %v, want team-a/warm", keys)
	}
}

// TestReconcileWithARefusedTemplate walks reconcile over a set whose
// template changed to one the API server refuses: the dead member is
// deleted, the outdated ones are kept and nothing is created; once the
// template is accepted, the rolling update starts, paced by both
// maxUnavailables.
func TestReconcileWithARefusedTemplate(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	set.Spec.Replicas = 4
	one := intstr.FromInt32(1)
	set.Spec.ScaleStrategy.MaxUnavailable = &one
	set.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "workspace"}}}
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var objs []runtime.Object
	for _, sb := range append(members("warm-old", 4, "r1", running), member("warm-dead", "r1", agentsv1alpha1.SandboxFailed)) {
		sb.Namespace = "team-a"
		sb.Labels[agentsv1alpha1.LabelSandboxPool] = set.Name
		sb.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
		if err := indexer.Add(sb); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, sb)
	}

	c := newCheckPool()
	c.refuse = `Pod "warm-" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit`
	client := fake.NewSimpleClientset(objs...)
	c.client = client
	c.sandboxes = listers.NewSandboxLister(indexer)

	writes := func() []string {
		var out []string
		for _, a := range client.Actions() {
			switch a := a.(type) {
			case clienttesting.DeleteAction:
				out = append(out, "delete "+a.GetName())
			case clienttesting.CreateAction:
				out = append(out, "create")
				if sb, ok := a.GetObject().(*agentsv1alpha1.Sandbox); !ok || len(sb.Spec.VolumeClaimTemplates) != 1 || sb.Spec.VolumeClaimTemplates[0].Name != "workspace" {
					t.Errorf("created member %+v does not carry the set's volumeClaimTemplates", a.GetObject())
				}
			}
		}
		client.ClearActions()
		return out
	}
	ctx := context.Background()
	if err := c.reconcile(ctx, set, &expectation{}); err != nil {
		t.Fatal(err)
	}
	if got := writes(); !slices.Equal(got, []string{"delete warm-dead"}) {
		t.Errorf("refused template: writes %v, want only the dead member deleted", got)
	}
	if ev := c.event(); !strings.HasPrefix(ev, revision+" ") || upgrade.TemplateRefusal(set, revision) == "" {
		t.Errorf("recorded %q, want the refusal of revision %s", ev, revision)
	}

	// The template is fixed (the same revision is accepted on its re-check):
	// 1 of 4 outdated members replaced (20% of 4, rounded up), 1 created
	// (scaleStrategy.maxUnavailable 1).
	if err := indexer.Delete(objs[4]); err != nil {
		t.Fatal(err)
	}
	c.refuse = ""
	c.checks["team-a/warm"] = templateCheck{uid: set.UID, revision: revision, refused: "was refused", at: time.Now().Add(-templateRecheck)}
	if err := c.reconcile(ctx, set, &expectation{}); err != nil {
		t.Fatal(err)
	}
	if got := writes(); !slices.Equal(got, []string{"delete warm-old-0", "create"}) {
		t.Errorf("accepted template: writes %v, want [delete warm-old-0 create]", got)
	}
}

// A pool sized to its namespace's pod quota: the dry run of the new template is refused
// by the quota, and so is one of the members' own template. The cause is the namespace,
// not the template, and the rolling update goes on (it frees the quota it needs by
// deleting an outdated member first). A template refused where the old one is not stays
// refused.
func TestTemplateRefusedOnlyWhenTheMembersTemplateIsAccepted(t *testing.T) {
	ctx := context.Background()
	quota := `pods "warm-" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10`
	c := newCheckPool()
	c.refuse = quota
	set := warmSet("uid-1", "registry.example/agent:v2")
	old := warmSet("uid-1", "registry.example/agent:v1").Spec.Template
	if refused, err := c.templateRefused(ctx, set, "r2", old, time.Now()); err != nil || refused != "" {
		t.Fatalf("at quota: refused %q, err %v; want accepted (the members' template is refused too)", refused, err)
	}
	if c.dryRuns != 2 {
		t.Errorf("%d dry runs, want 2 (the new template, then the members')", c.dryRuns)
	}

	c = newCheckPool()
	invalid := `Pod "warm" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit`
	c.dryRun = func(_ context.Context, pod *corev1.Pod) (string, error) {
		c.dryRuns++
		if pod.Spec.Containers[0].Image == "registry.example/agent:v2" {
			return invalid, nil
		}
		return "", nil
	}
	if refused, err := c.templateRefused(ctx, set, "r2", old, time.Now()); err != nil || refused != invalid {
		t.Fatalf("a template refused alone: refused %q, err %v; want the API server's words", refused, err)
	}
}

// TestRecordedRefusalIsCheckedAgainWithNothingToReplace: a set scaled down
// to its outdated members needs no template, yet its recorded refusal is
// checked again once the verdict expires, and removed when the template is
// accepted now; TemplateRefused must not outlive its cause.
func TestRecordedRefusalIsCheckedAgainWithNothingToReplace(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	set.Annotations = map[string]string{upgrade.AnnotationTemplateCheck: upgrade.TemplateCheckValue(revision, "refused by quota")}
	c := newCheckPool()
	c.client = fake.NewSimpleClientset()
	c.sandboxes = listers.NewSandboxLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	c.checks["team-a/warm"] = templateCheck{uid: set.UID, revision: revision, refused: "refused by quota", at: time.Now().Add(-templateRecheck)}
	if err := c.reconcile(context.Background(), set, &expectation{}); err != nil {
		t.Fatal(err)
	}
	if c.dryRuns != 1 {
		t.Errorf("dry runs %d, want the expired refusal checked again once", c.dryRuns)
	}
	if got := set.Annotations[upgrade.AnnotationTemplateCheck]; got != "" {
		t.Errorf("template check %q still recorded after the template was accepted", got)
	}
}

// TestReconcileLeavesAClaimedSandboxAlone: a sandbox labelled
// sandbox-claimed=true is a user's even while the set still controls it (a
// claim written in two steps, or by hand): neither the rolling update nor a
// scale-down deletes it, and it does not count towards spec.replicas.
func TestReconcileLeavesAClaimedSandboxAlone(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		replicas int32
		members  []*agentsv1alpha1.Sandbox // besides warm-claimed, on claimedRev
		claimed  string                    // warm-claimed's revision
		want     []string
	}{
		{
			// The oldest outdated member (first by name) is the claimed one.
			name: "rolling update", replicas: 2, members: members("warm-old", 2, "r1", running), claimed: "r1",
			want: []string{"delete warm-old-0", "create"},
		},
		{
			name: "scale down", replicas: 1, members: members("warm-new", 1, revision, running), claimed: revision,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := set.DeepCopy()
			set.Spec.Replicas = tt.replicas
			user := member("warm-claimed", tt.claimed, running)
			user.Labels[agentsv1alpha1.LabelSandboxClaimed] = "true"
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			var objs []runtime.Object
			for _, sb := range append(tt.members, user) {
				sb.Namespace = "team-a"
				sb.Labels[agentsv1alpha1.LabelSandboxPool] = set.Name
				sb.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
				if err := indexer.Add(sb); err != nil {
					t.Fatal(err)
				}
				objs = append(objs, sb)
			}
			c := newCheckPool()
			client := fake.NewSimpleClientset(objs...)
			c.client = client
			c.sandboxes = listers.NewSandboxLister(indexer)
			if err := c.reconcile(context.Background(), set, &expectation{}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range client.Actions() {
				switch a := a.(type) {
				case clienttesting.DeleteAction:
					got = append(got, "delete "+a.GetName())
				case clienttesting.CreateAction:
					got = append(got, "create")
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("writes %v, want %v (warm-claimed is the user's)", got, tt.want)
			}
		})
	}
}

// Refusals as the API server words them (upgrade.PodRefusal of its errors).
const (
	quotaFull   = `pods "warm-x7k2p" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10`
	podSecurity = `pods "warm-x7k2p" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "sandbox" must set securityContext.allowPrivilegeEscalation=false)`
	webhook     = `admission webhook "policy.example.com" denied the request: images must come from registry.internal`
	// A full CPU quota refusing a pod asking 64 cpu, and one asking 1.
	cpuFull64 = `pods "warm" is forbidden: exceeded quota: compute, requested: requests.cpu=64, limited: requests.cpu=16`
	cpuFull1  = `pods "warm" is forbidden: exceeded quota: compute, requested: requests.cpu=1, limited: requests.cpu=16`
)

// TestTemplateRefusedUnlessBothAreOverQuota: a refusal of the members' own
// template excuses the new template's only when both are a full
// ResourceQuota in the same words (deleting a member makes room for its
// replacement); a new template asking for more than the members' is
// refused by the quota in other words, and stays refused. Pod
// Security tightened, or a webhook refusing both, leaves the new template
// refused: its replacements would be refused too (rule 8).
func TestTemplateRefusedUnlessBothAreOverQuota(t *testing.T) {
	tests := []struct {
		name        string
		newT, oldT  string // the API server's answer for each template ("" accepted)
		wantRefused string
		wantDryRuns int
	}{
		{name: "both over quota: the namespace is full", newT: quotaFull, oldT: quotaFull, wantDryRuns: 2},
		{name: "pod security refuses both", newT: podSecurity, oldT: podSecurity, wantRefused: podSecurity, wantDryRuns: 1},
		{name: "a webhook refuses both", newT: webhook, oldT: webhook, wantRefused: webhook, wantDryRuns: 1},
		{name: "new over quota, old refused by pod security", newT: quotaFull, oldT: podSecurity, wantRefused: quotaFull, wantDryRuns: 2},
		{name: "new refused by pod security, old over quota", newT: podSecurity, oldT: quotaFull, wantRefused: podSecurity, wantDryRuns: 1},
		{name: "new over quota, old accepted", newT: quotaFull, wantRefused: quotaFull, wantDryRuns: 2},
		{name: "both over quota, the new one asking more", newT: cpuFull64, oldT: cpuFull1, wantRefused: cpuFull64, wantDryRuns: 2},
	}
	set := warmSet("uid-1", "registry.example/agent:v2")
	old := warmSet("uid-1", "registry.example/agent:v1").Spec.Template
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCheckPool()
			c.dryRun = func(_ context.Context, pod *corev1.Pod) (string, error) {
				c.dryRuns++
				if pod.Spec.Containers[0].Image == "registry.example/agent:v2" {
					return tt.newT, nil
				}
				return tt.oldT, nil
			}
			refused, err := c.templateRefused(context.Background(), set.DeepCopy(), "r2", old, time.Now())
			if err != nil || refused != tt.wantRefused {
				t.Errorf("refused %q, err %v; want %q", refused, err, tt.wantRefused)
			}
			if c.dryRuns != tt.wantDryRuns {
				t.Errorf("%d dry runs, want %d", c.dryRuns, tt.wantDryRuns)
			}
		})
	}
}

// TestReconcileKeepsMembersWhenBothTemplatesAreRefused: Pod Security
// tightened in the namespace refuses the members' template and the new
// one alike; the pool deletes no Running member (its replacement would be
// refused) and shows the refusal.
func TestReconcileKeepsMembersWhenBothTemplatesAreRefused(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	set.Spec.Replicas = 4
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	old := warmSet("uid-1", "registry.example/agent:v1").Spec.Template
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var objs []runtime.Object
	for _, sb := range members("warm-old", 4, "r1", running) {
		sb.Namespace = "team-a"
		sb.Labels[agentsv1alpha1.LabelSandboxPool] = set.Name
		sb.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
		sb.Spec.Template = old.DeepCopy()
		if err := indexer.Add(sb); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, sb)
	}
	c := newCheckPool()
	c.refuse = podSecurity // every template, the members' own too
	client := fake.NewSimpleClientset(objs...)
	c.client = client
	c.sandboxes = listers.NewSandboxLister(indexer)
	if err := c.reconcile(context.Background(), set, &expectation{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" || a.GetVerb() == "create" {
			t.Errorf("the pool wrote %s %v while every replacement would be refused", a.GetVerb(), a)
		}
	}
	if why := upgrade.TemplateRefusal(set, revision); !strings.Contains(why, "PodSecurity") || !strings.Contains(why, "fix spec.template") {
		t.Errorf("recorded refusal %q, want the Pod Security refusal and to fix spec.template", why)
	}
}

// TestTemplateRefusedMessage: a full quota with no member on an earlier
// template (a refill) says to raise the quota, not to fix the template;
// and however long the API server's words, the message keeps its next step
// within a condition's length.
func TestTemplateRefusedMessage(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v2")
	long := func(cause string) string { return cause + strings.Repeat(" and a very long admission message", 100) }
	tests := []struct {
		name      string
		cause     string
		baseline  bool
		want      []string
		wantNot   []string
		wantSuffx string
	}{
		{name: "quota full, refill", cause: quotaFull,
			want:      []string{"ResourceQuota is full", "exceeded quota", "revision r2", "kubectl describe resourcequota -n team-a"},
			wantNot:   []string{"fix spec.template", "kubectl patch"},
			wantSuffx: "or free room in the namespace"},
		{name: "quota full, refill, long words", cause: long(quotaFull), wantSuffx: "or free room in the namespace"},
		{name: "pod security, refill", cause: podSecurity, want: []string{"PodSecurity", "fix spec.template"}, wantSuffx: "`kubectl edit sbs warm -n team-a`"},
		{name: "quota, members on an earlier template accepted", cause: quotaFull, baseline: true,
			want: []string{"exceeded quota", "fix spec.template"}, wantSuffx: "`kubectl edit sbs warm -n team-a`"},
		{name: "webhook, long words", cause: long(webhook), wantSuffx: "`kubectl edit sbs warm -n team-a`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCheckPool()
			c.dryRun = func(_ context.Context, pod *corev1.Pod) (string, error) {
				if pod.Spec.Containers[0].Image == "registry.example/agent:v2" {
					return tt.cause, nil
				}
				return "", nil
			}
			var baseline *corev1.PodTemplateSpec
			if tt.baseline {
				baseline = warmSet("uid-1", "registry.example/agent:v1").Spec.Template
			}
			set := set.DeepCopy()
			if refused, err := c.templateRefused(context.Background(), set, "r2", baseline, time.Now()); err != nil || refused == "" {
				t.Fatalf("refused %q, err %v; want a refusal", refused, err)
			}
			msg := upgrade.TemplateRefusal(set, "r2")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(msg, w) {
					t.Errorf("message %q says %q", msg, w)
				}
			}
			if !strings.HasSuffix(msg, tt.wantSuffx) {
				t.Errorf("message %q does not end with its next step %q", msg, tt.wantSuffx)
			}
			if len(msg) > agentsv1alpha1.MaxConditionMessageLength {
				t.Errorf("message is %d bytes, more than a condition holds (%d)", len(msg), agentsv1alpha1.MaxConditionMessageLength)
			}
		})
	}
}

// A member create the API server refuses (here a ResourceQuota on
// sandboxes) is recorded on the set, with the server's words, for statusagg
// to show; a transient failure leaves the record as it is; the first
// member created removes it.
func TestRefusedMemberCreateIsRecordedUntilOneIsCreated(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v1")
	set.Spec.Replicas = 1
	c := newCheckPool()
	client := fake.NewSimpleClientset()
	c.client = client
	c.sandboxes = listers.NewSandboxLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	var refuse error = apierrors.NewForbidden(schema.GroupResource{Group: "agents.kruise.io", Resource: "sandboxes"}, "warm-x",
		errors.New("exceeded quota: sandboxes, requested: count/sandboxes.agents.kruise.io=1, used: count/sandboxes.agents.kruise.io=10, limited: count/sandboxes.agents.kruise.io=10"))
	client.PrependReactor("create", "sandboxes", func(clienttesting.Action) (bool, runtime.Object, error) {
		if refuse != nil {
			return true, nil, refuse
		}
		return false, nil, nil
	})
	ctx := context.Background()
	if err := c.reconcile(ctx, set, &expectation{}); err == nil {
		t.Fatal("reconcile with a refused create: no error, want one so the sync is retried")
	}
	got := set.Annotations[upgrade.AnnotationMemberCreateError]
	if !strings.Contains(got, "exceeded quota") || strings.Contains(got, "used:") {
		t.Errorf("recorded %q, want the quota refusal without its changing counts", got)
	}
	refuse = apierrors.NewServerTimeout(schema.GroupResource{Group: "agents.kruise.io", Resource: "sandboxes"}, "create", 1)
	if err := c.reconcile(ctx, set, &expectation{}); err == nil {
		t.Fatal("reconcile with a timed-out create: no error")
	}
	if set.Annotations[upgrade.AnnotationMemberCreateError] != got {
		t.Errorf("a timeout changed the record to %q", set.Annotations[upgrade.AnnotationMemberCreateError])
	}
	// Room for one of two: the record stands (it is not removed and
	// written again for each member the quota lets through).
	set.Spec.Replicas = 2
	quota := refuse
	allowed := 1
	refuse = nil
	n := 0
	client.PrependReactor("create", "sandboxes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if allowed == 0 {
			return true, nil, quota
		}
		allowed--
		n++ // the tracker generates no names
		sb := a.(clienttesting.CreateAction).GetObject().(*agentsv1alpha1.Sandbox)
		sb.Name = fmt.Sprintf("%s%d", sb.GenerateName, n)
		return false, nil, nil
	})
	c.others = nil
	if err := c.reconcile(ctx, set, &expectation{}); err == nil {
		t.Fatal("reconcile with the second create refused: no error")
	}
	if len(c.others) != 0 || set.Annotations[upgrade.AnnotationMemberCreateError] == "" {
		t.Errorf("room for one of two: writes %v, record %q; want the record kept as it was", c.others, set.Annotations[upgrade.AnnotationMemberCreateError])
	}
	allowed = 2
	if err := c.reconcile(ctx, set, &expectation{}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if v, ok := set.Annotations[upgrade.AnnotationMemberCreateError]; ok {
		t.Errorf("record %q kept after every member was created", v)
	}
}
