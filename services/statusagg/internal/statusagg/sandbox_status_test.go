package statusagg

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

func testSandbox() *agentsv1alpha1.Sandbox {
	return &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: "ns", UID: "sb-uid", Generation: 3},
		Spec: agentsv1alpha1.SandboxSpec{EmbeddedSandboxTemplate: agentsv1alpha1.EmbeddedSandboxTemplate{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img:v1"}}}},
		}},
	}
}

func testPod(ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: "ns", UID: "pod-uid"},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func withUpgrade(sb *agentsv1alpha1.Sandbox, reason, message string) *agentsv1alpha1.Sandbox {
	// Claimed by its ops, as a sandbox in an ops's attempt is.
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	sb.Labels[agentsv1alpha1.LabelUpdateOps] = "ops"
	recordTransition(&sb.Status.Conditions, transition{Attempt: "uid-1", To: reason, Message: message}, sb.Generation, metav1.Now())
	return sb
}

func TestDesiredSandboxStatus(t *testing.T) {
	paused := testSandbox()
	paused.Spec.Paused = true
	noTemplate := testSandbox()
	noTemplate.Spec.Template = nil
	refused := testSandbox()
	refused.Annotations = map[string]string{upgrade.AnnotationPodCreateError: `create pod ns/sb: pods "sb" is forbidden: exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5`}
	for _, tc := range []struct {
		name        string
		sb          *agentsv1alpha1.Sandbox
		pod         *corev1.Pod
		wantPhase   agentsv1alpha1.SandboxPhase
		wantReady   metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{"no pod is Pending, and says so", testSandbox(), nil, agentsv1alpha1.SandboxPending, metav1.ConditionFalse, ReadyReasonPodNotCreated, "pod sb does not exist yet"},
		{"paused without pod is Paused", paused, nil, agentsv1alpha1.SandboxPaused, metav1.ConditionFalse, ReadyReasonPaused, ""},
		{"no template says so, not to wait", noTemplate, nil, agentsv1alpha1.SandboxPending, metav1.ConditionFalse, agentsv1alpha1.ReadyReasonPodCreateFailed,
			"pod sb is not created: " + agentsv1alpha1.NoTemplateProblem},
		{"a refused pod says why", refused, nil, agentsv1alpha1.SandboxPending, metav1.ConditionFalse, agentsv1alpha1.ReadyReasonPodCreateFailed, podCreateFailedMessage(refused)},
		{"a refusal recorded before the pod was created is past", refused, testPod(true), agentsv1alpha1.SandboxRunning, metav1.ConditionTrue, "PodReady", ""},
		{"ready pod is Running", testSandbox(), testPod(true), agentsv1alpha1.SandboxRunning, metav1.ConditionTrue, "PodReady", ""},
		{"unready pod is Pending", testSandbox(), testPod(false), agentsv1alpha1.SandboxPending, metav1.ConditionFalse, ReadyReasonPodNotReady, "pod sb is Running"},
		{"a stage in progress is Upgrading", withUpgrade(testSandbox(), "UpgradePod", ""), testPod(true),
			agentsv1alpha1.SandboxUpgrading, metav1.ConditionFalse, "Upgrading", ""},
		{"a failure stays Upgrading with its message", withUpgrade(testSandbox(), "UpgradePodFailed", "container main: CrashLoopBackOff - back-off 10s restarting failed container"), testPod(false),
			agentsv1alpha1.SandboxUpgrading, metav1.ConditionFalse, "Upgrading", "container main: CrashLoopBackOff - back-off 10s restarting failed container; " + opsNextStepFor("ops", "ns")},
		{"success falls back to the pod", withUpgrade(testSandbox(), "Succeeded", ""), testPod(true),
			agentsv1alpha1.SandboxRunning, metav1.ConditionTrue, "PodReady", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := desiredSandboxStatus(tc.sb, tc.pod)
			ready := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady)
			if st.Phase != tc.wantPhase || ready == nil || ready.Status != tc.wantReady || ready.Reason != tc.wantReason || st.Message != tc.wantMessage {
				t.Fatalf("status = phase %s, ready %+v, message %q; want %s, %s/%s, %q", st.Phase, ready, st.Message, tc.wantPhase, tc.wantReady, tc.wantReason, tc.wantMessage)
			}
			if st.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", st.ObservedGeneration)
			}
			if rev, _ := upgrade.Revision(tc.sb.Spec.Template); tc.sb.Spec.Template != nil && st.UpdateRevision != rev {
				t.Errorf("updateRevision = %q, want %q", st.UpdateRevision, rev)
			}
			if tc.pod != nil && (st.PodInfo.PodUID != "pod-uid" || st.SandboxIP != "10.0.0.7" || st.NodeName != "node-1" || st.PodInfo.PodIP != "10.0.0.7") {
				t.Errorf("pod fields = %+v ip %q node %q", st.PodInfo, st.SandboxIP, st.NodeName)
			}
			if tc.wantReady == metav1.ConditionFalse && tc.wantReason == "Upgrading" && ready.Message != "sandbox is upgrading" {
				t.Errorf("ready message = %q", ready.Message)
			}
		})
	}
}

func TestDesiredSandboxStatusIsStable(t *testing.T) {
	sb := testSandbox()
	pod := testPod(true)
	sb.Status = desiredSandboxStatus(sb, pod)
	before := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady).LastTransitionTime
	again := desiredSandboxStatus(sb, pod)
	if after := meta.FindStatusCondition(again.Conditions, agentsv1alpha1.ConditionReady).LastTransitionTime; !after.Equal(&before) {
		t.Fatalf("lastTransitionTime moved without a status flip: %v → %v", before, after)
	}
}

func TestConditionMessagesAreCapped(t *testing.T) {
	sb := withUpgrade(testSandbox(), "PostUpgradeFailed", strings.Repeat("x", 5000))
	st := desiredSandboxStatus(sb, nil)
	if up := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionUpgrading); len(up.Message) != agentsv1alpha1.MaxConditionMessageLength {
		t.Fatalf("Upgrading message is %d bytes, want %d", len(up.Message), agentsv1alpha1.MaxConditionMessageLength)
	}
}

// A refused pod is told once per refusal: a Warning Event when Ready turns
// PodCreateFailed or its words change, none when the status is rewritten
// with the same refusal.
func TestPodCreateRefusalNews(t *testing.T) {
	sb := testSandbox()
	sb.Annotations = map[string]string{upgrade.AnnotationPodCreateError: `pods "sb" is forbidden: exceeded quota`}
	refused := desiredSandboxStatus(sb, nil)
	ready := meta.FindStatusCondition(refused.Conditions, agentsv1alpha1.ConditionReady)
	if !strings.Contains(ready.Message, "exceeded quota") || !strings.Contains(ready.Message, "ResourceQuota") {
		t.Fatalf("Ready message %q: want the server's words and what to fix", ready.Message)
	}
	pending := desiredSandboxStatus(testSandbox(), nil)
	if got := refusalNews(&pending, &refused, agentsv1alpha1.ConditionReady, agentsv1alpha1.ReadyReasonPodCreateFailed); got != ready.Message {
		t.Errorf("news from PodNotCreated = %q, want the message", got)
	}
	if got := refusalNews(&refused, &refused, agentsv1alpha1.ConditionReady, agentsv1alpha1.ReadyReasonPodCreateFailed); got != "" {
		t.Errorf("news of the same refusal again = %q, want none", got)
	}
	sb.Annotations[upgrade.AnnotationPodCreateError] = `pod "sb" is invalid: spec.containers[0].name: Invalid value: "Main_1"`
	other := desiredSandboxStatus(sb, nil)
	if got := refusalNews(&refused, &other, agentsv1alpha1.ConditionReady, agentsv1alpha1.ReadyReasonPodCreateFailed); got == "" {
		t.Error("no news of a refusal in other words")
	}
	if got := refusalNews(&refused, &pending, agentsv1alpha1.ConditionReady, agentsv1alpha1.ReadyReasonPodCreateFailed); got != "" {
		t.Errorf("news when the refusal is gone = %q", got)
	}
}

// A paused sandbox whose pod the API server refuses to delete stays Running
// and says why in SandboxPaused and the MESSAGE column, and a Warning Event
// tells it once; unpaused, the condition says NotPaused again.
func TestPodDeleteRefusedSaysWhyThePauseWaits(t *testing.T) {
	sb := testSandbox()
	sb.Spec.Paused = true
	sb.Annotations = map[string]string{upgrade.AnnotationPodDeleteError: "pods may not be deleted here"}
	running := desiredSandboxStatus(testSandbox(), testPod(true))
	st := desiredSandboxStatus(sb, testPod(true))
	paused := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxPaused)
	if st.Phase != agentsv1alpha1.SandboxRunning || paused == nil || paused.Status != metav1.ConditionFalse || paused.Reason != PausedReasonPodDeleteRefused {
		t.Fatalf("phase %s, SandboxPaused %+v; want Running, False/%s", st.Phase, paused, PausedReasonPodDeleteRefused)
	}
	for _, want := range []string{"pods may not be deleted here", "refuses to delete its pod sb", "or unpause the sandbox"} {
		if !strings.Contains(paused.Message, want) {
			t.Errorf("SandboxPaused message %q lacks %q", paused.Message, want)
		}
	}
	if st.Message != paused.Message {
		t.Errorf("status.message = %q, want SandboxPaused's message", st.Message)
	}
	if got := refusalNews(&running, &st, agentsv1alpha1.ConditionSandboxPaused, PausedReasonPodDeleteRefused); got != paused.Message {
		t.Errorf("news of the refusal = %q, want its message", got)
	}
	if got := refusalNews(&st, &st, agentsv1alpha1.ConditionSandboxPaused, PausedReasonPodDeleteRefused); got != "" {
		t.Errorf("news of the same refusal again = %q, want none", got)
	}
	sb.Status = st
	sb.Spec.Paused = false
	again := desiredSandboxStatus(sb, testPod(true))
	if c := meta.FindStatusCondition(again.Conditions, agentsv1alpha1.ConditionSandboxPaused); c == nil || c.Reason != PausedReasonNotPaused || again.Message != "" {
		t.Errorf("unpaused: SandboxPaused %+v, message %q; want NotPaused and no message", c, again.Message)
	}
}

// A sandbox whose upgrade failed with its old pod kept, and which has lost
// that pod since while the API server refuses a new one from the patched
// template, says so first in status.message (the failure's own words still
// say the old pod keeps running); with its pod, only the failure shows.
func TestPodRefusedAfterAFailedUpgradeSaysThePodIsGone(t *testing.T) {
	const failure = "the API server refuses the new pod: ...; the old pod (uid 1) was not deleted and keeps running: fix the patch or the sandbox's template, then create a new SandboxUpdateOps to resume"
	sb := withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePodFailed, failure)
	sb.Annotations = map[string]string{upgrade.AnnotationPodCreateError: `Pod "sb" is invalid: spec.containers[0].image: Required value`}
	withPod := desiredSandboxStatus(sb, testPod(true))
	if withPod.Message != failure {
		t.Errorf("with its pod: message %q, want the failure's", withPod.Message)
	}
	gone := desiredSandboxStatus(sb, nil)
	ready := meta.FindStatusCondition(gone.Conditions, agentsv1alpha1.ConditionReady)
	if gone.Phase != agentsv1alpha1.SandboxUpgrading || ready.Reason != agentsv1alpha1.ReadyReasonUpgrading {
		t.Errorf("phase %s, Ready %s; want Upgrading, Upgrading", gone.Phase, ready.Reason)
	}
	for _, want := range []string{"pod sb is gone and the API server refuses a new one", "spec.containers[0].image: Required value", "create a new SandboxUpdateOps", failure} {
		if !strings.Contains(gone.Message, want) {
			t.Errorf("without its pod: message %q lacks %q", gone.Message, want)
		}
	}
}

// A sandbox without spec.template says what to set, not to wait for a pod.
func TestNoTemplateSaysWhatToSet(t *testing.T) {
	sb := testSandbox()
	sb.Spec.Template = nil
	ready := meta.FindStatusCondition(desiredSandboxStatus(sb, nil).Conditions, agentsv1alpha1.ConditionReady)
	if ready == nil || !strings.Contains(ready.Message, "no spec.template") || !strings.Contains(ready.Message, "set spec.template") {
		t.Fatalf("Ready = %+v, want it to name the missing spec.template and what to do", ready)
	}
}

// PodNotReady's message says what holds the pod's containers, so a user sees
// ImagePullBackOff or a crash without describing the pod; a back-off's
// changing words are left out, a configuration error's are kept.
func TestPodNotReadyMessageNamesWhatHoldsTheContainers(t *testing.T) {
	pod := testPod(false)
	pod.Name = "box"
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope:v9"`}}},
		{Name: "sidecar", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "token" not found`}}},
		{Name: "creating", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
	}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}},
	}
	want := `pod box is Pending; container init exited with code 2 (Error); container main waits: its image does not pull (ImagePullBackOff; kubectl describe pod box says why); container sidecar waits: CreateContainerConfigError: secret "token" not found`
	if got := podNotReadyMessage(pod); !strings.HasPrefix(got, "pod box is Pending") || !strings.HasSuffix(got, want[len("pod box is Pending"):]) {
		t.Errorf("message\n%s\nwant\n%s", got, want)
	}
}

// A failed pod's message names the container that exited (restartPolicy
// Never: the kubelet writes no message of its own), so a pool's kept dead
// member says why it died.
func TestPodFailedMessageNamesTheContainerThatExited(t *testing.T) {
	pod := testPod(false)
	pod.Name = "warm-a"
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}},
	}
	if got, want := podFailedMessage(pod), "pod warm-a has failed; container main exited with code 1 (Error)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	pod.Status.Message, pod.Status.ContainerStatuses = "The node was low on resource: memory.", nil
	if got, want := podFailedMessage(pod), "pod warm-a has failed: The node was low on resource: memory."; got != want {
		t.Errorf("evicted: message %q, want %q", got, want)
	}
}

// The message stays the same while a pod cycles through the same cause: an
// image pull that alternates ErrImagePull and ImagePullBackOff, a container
// that runs, exits and backs off in turn. Each change would be a status write.
func TestPodNotReadyMessageIsStableWhileThePodCycles(t *testing.T) {
	at := func(states ...corev1.ContainerStatus) string {
		pod := testPod(false)
		pod.Status.ContainerStatuses = states
		return podNotReadyMessage(pod)
	}
	pulling := []corev1.ContainerStatus{
		{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "rpc error: manifest unknown"}}},
		{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope:v9"`}}},
	}
	if a, b := at(pulling[0]), at(pulling[1]); a != b {
		t.Errorf("image pull: %q then %q", a, b)
	}
	exited := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	crashing := []corev1.ContainerStatus{
		{Name: "main", RestartCount: 3, LastTerminationState: corev1.ContainerState{Terminated: exited}, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "main", RestartCount: 3, LastTerminationState: corev1.ContainerState{Terminated: exited}, State: corev1.ContainerState{Terminated: exited}},
		{Name: "main", RestartCount: 4, LastTerminationState: corev1.ContainerState{Terminated: exited}, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}}},
	}
	first := at(crashing[0])
	if !strings.Contains(first, "container main keeps exiting (CrashLoopBackOff): last exit code 1 (Error)") {
		t.Errorf("crash loop: %q", first)
	}
	for _, s := range crashing[1:] {
		if got := at(s); got != first {
			t.Errorf("crash loop: %q, then %q", first, got)
		}
	}
}

// A failed sandbox says what to do next after its failure's words: claimed,
// how its ops is retried; failed in a direct upgrade, how a direct upgrade
// is; no ops claims it any more (its ops was deleted), that nothing drives
// it and how to go on.
func TestUnclaimedFailureSaysHowToGoOn(t *testing.T) {
	const failure = "container main: CrashLoopBackOff - back-off 10s restarting failed container"
	sb := withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePodFailed, failure)
	if st := desiredSandboxStatus(sb, testPod(true)); st.Message != failure+"; "+opsNextStepFor("ops", "ns") {
		t.Errorf("claimed: message %q, want the failure's, then how its ops is retried", st.Message)
	}
	delete(sb.Labels, agentsv1alpha1.LabelUpdateOps)
	st := desiredSandboxStatus(sb, testPod(true))
	if !strings.HasPrefix(st.Message, failure+"; no SandboxUpdateOps drives it now") || !strings.Contains(st.Message, "agents.kruise.io/upgrade-failed") {
		t.Errorf("unclaimed: message %q, want the failure, then how to go on", st.Message)
	}
	long := withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonPostUpgradeFailed, strings.Repeat("x", 5000))
	delete(long.Labels, agentsv1alpha1.LabelUpdateOps)
	if st := desiredSandboxStatus(long, testPod(true)); len(st.Message) > agentsv1alpha1.MaxConditionMessageLength || !strings.HasSuffix(st.Message, unclaimedSuffix) {
		t.Errorf("unclaimed, long failure: %d bytes, ends %q; want at most %d, ending with what to do", len(st.Message), st.Message[max(0, len(st.Message)-60):], agentsv1alpha1.MaxConditionMessageLength)
	}
	direct := testSandbox()
	recordTransition(&direct.Status.Conditions, transition{Attempt: upgrade.DirectAttempt("rev", direct.Generation), To: agentsv1alpha1.UpgradingReasonUpgradePodFailed, Message: failure}, direct.Generation, metav1.Now())
	if st := desiredSandboxStatus(direct, testPod(true)); st.Message != failure+"; "+directNextStep {
		t.Errorf("direct upgrade: message %q, want the failure's, then how a direct upgrade is retried", st.Message)
	}
}

// A new pod the scheduler cannot place says so in the MESSAGE column while UpgradePod
// waits (before, only at the stage's deadline, minutes later); a pod merely on its way
// says nothing, and neither does one in another stage.
func TestUnschedulableNewPodIsSaidAtOnce(t *testing.T) {
	pending := testPod(false)
	pending.Spec.NodeName = ""
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}}}
	st := desiredSandboxStatus(withUpgrade(testSandbox(), "UpgradePod", ""), pending)
	for _, want := range []string{"UpgradePod: the new pod sb cannot be scheduled", "didn't match Pod's node affinity/selector", "nodeSelector"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q lacks %q", st.Message, want)
		}
	}
	if st.Phase != agentsv1alpha1.SandboxUpgrading {
		t.Errorf("phase %s, want Upgrading", st.Phase)
	}
	onItsWay := pending.DeepCopy()
	onItsWay.Status.Conditions = nil
	if st := desiredSandboxStatus(withUpgrade(testSandbox(), "UpgradePod", ""), onItsWay); st.Message != "" {
		t.Errorf("a pod on its way: message %q, want none", st.Message)
	}
	// A paused sandbox woken for its upgrade whose pod cannot be placed says so too.
	if st := desiredSandboxStatus(withUpgrade(testSandbox(), "Resuming", ""), pending); !strings.HasPrefix(st.Message, "Resuming: the pod that wakes the paused sandbox sb cannot be scheduled") {
		t.Errorf("in Resuming: message %q", st.Message)
	}
	if st := desiredSandboxStatus(withUpgrade(testSandbox(), "PostUpgrade", ""), pending); st.Message != "" {
		t.Errorf("in PostUpgrade: message %q, want none", st.Message)
	}
}

// A paused sandbox woken for an upgrade has no pod for a moment in
// UpgradePod: its SandboxPaused condition does not turn True ("stopped for a
// pause") and back. Once the attempt ends with no pod, it is paused again.
func TestWokenSandboxBetweenItsPodsIsNotCalledPaused(t *testing.T) {
	sb := withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePod, "")
	sb.Spec.Paused = true
	sb.Annotations = map[string]string{agentsv1alpha1.AnnotationUpgradeResumeTrigger: "true"}
	// Stopped for its pause, then its woken pod was seen running.
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionTrue, Reason: PausedReasonPodStopped})
	sb.Status = desiredSandboxStatus(sb, testPod(true))
	if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("SandboxPaused with the woken pod running = %+v; want False", c)
	}
	st := desiredSandboxStatus(sb, nil)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxPaused); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("SandboxPaused mid-upgrade with no pod = %+v; want it not True", c)
	}
	done := withUpgrade(sb.DeepCopy(), agentsv1alpha1.UpgradingReasonSucceeded, "")
	st = desiredSandboxStatus(done, nil)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxPaused); st.Phase != agentsv1alpha1.SandboxPaused || c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("after the attempt: phase %s, SandboxPaused %+v; want Paused, True", st.Phase, c)
	}
}

// A paused sandbox whose pod runs for its upgrade (woken for it, or paused
// mid-stage) says so in SandboxPaused (False, KeptForUpgrade), not NotPaused
// as if it had been unpaused; once the upgrade ended and the pod is stopped,
// it is paused again (True, PodStopped).
func TestPausedSandboxKeptForItsUpgradeSaysSo(t *testing.T) {
	sb := testSandbox()
	sb.Spec.Paused = true
	sb.Status.Conditions = []metav1.Condition{
		{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionTrue, Reason: PausedReasonPodStopped},
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPreUpgrade, Message: "uid-1"},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPreUpgrade},
	}
	st := desiredSandboxStatus(sb, testPod(true))
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxPaused); c == nil || c.Status != metav1.ConditionFalse || c.Reason != PausedReasonKeptForUpgrade {
		t.Fatalf("pod kept for the upgrade: SandboxPaused %+v, want False/%s", c, PausedReasonKeptForUpgrade)
	}
	sb.Status = st
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonSucceeded, Message: "uid-1"})
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonSucceeded})
	again := desiredSandboxStatus(sb, nil)
	if c := meta.FindStatusCondition(again.Conditions, agentsv1alpha1.ConditionSandboxPaused); c == nil || c.Status != metav1.ConditionTrue || c.Reason != PausedReasonPodStopped || again.Phase != agentsv1alpha1.SandboxPaused {
		t.Errorf("upgrade ended, pod stopped: phase %s, SandboxPaused %+v; want Paused, True/%s", again.Phase, c, PausedReasonPodStopped)
	}
}

// A sandbox an ops failed because its new image does not pull does not say
// that `kubectl molt retry` resumes it: the retry keeps the patch that most
// likely set that image (a walk followed it and failed the same way; the
// ops's condition already said so). Any other failure keeps the retry.
func TestImageNotPulledNextStep(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box-0", Namespace: "team",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "bad"}}}
	pull := `new pod box-0 not Ready: container sandbox: ImagePullBackOff - Back-off pulling image "my-registry/sandbox-image:non-existent"`
	got := failureWithNextStep(sb, "ops-uid", pull)
	for _, want := range []string{pull, "fails the same way", "create a new SandboxUpdateOps whose patch sets a working image on it", "with the postUpgrade that restores the backup", "imagePullSecrets", "`kubectl molt retry bad -n team`"} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q lacks %q", got, want)
		}
	}
	if hook := failureWithNextStep(sb, "ops-uid", "hook exited with code 1"); !strings.Contains(hook, "resumes it from the failed step") {
		t.Errorf("a hook's failure says %q; want the retry as its way on", hook)
	}
	// A preUpgrade script that ran and failed is the likelier cause, which
	// a retry keeps: a new ops with it fixed comes first.
	sb.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed, Message: "ops-uid"},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed},
	}
	script := "hook failed with exit code 1, stderr: disk full, stdout: "
	got = failureWithNextStep(sb, "ops-uid", script)
	if first, retry := strings.Index(got, "create a new SandboxUpdateOps with it fixed"), strings.Index(got, "`kubectl molt retry bad -n team`"); first < 0 || retry < first || !strings.Contains(got, "fails the same way") {
		t.Errorf("a failed preUpgrade script says %q; want a new ops with it fixed first, then the retry", got)
	}
	sb.Spec.Paused = true // woken for the ops, paused again once it failed
	if got = failureWithNextStep(sb, "ops-uid", script); strings.Contains(got, "its pod left as it was") || !strings.Contains(got, "it is paused again") {
		t.Errorf("a paused sandbox's failed preUpgrade says %q; its pod is stopped, not left as it was", got)
	}
}

// A sandbox whose postUpgrade an ops failed says that its new pod runs
// without the workspace restored, and the two ways on (a walk read only
// "fix the cause, then retry" beside an empty workspace); not so under
// CheckpointRestore, whose pod was restored from the checkpoint.
func TestPostUpgradeFailedSaysTheWorkspaceIsNotRestored(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "hp",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "post1"}}}
	sb.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPostUpgradeFailed, Message: "ops-uid"},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPostUpgradeFailed},
	}
	failure := "hook failed with exit code 1, stderr: restore of p1 failed"
	got := failureWithNextStep(sb, "ops-uid", failure)
	for _, want := range []string{failure, "runs without its workspace restored", "keep its users off it", "`kubectl molt retry post1 -n hp` runs postUpgrade again on this pod", "with only the fixed postUpgrade and no patch"} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q lacks %q", got, want)
		}
	}
	// Paused again after the attempt (an ops with stateFilter Paused): no
	// pod runs, and the retry wakes it on a new one (a walk read "the pod
	// runs", "this pod" with no pod there).
	sb.Spec.Paused = true
	got = failureWithNextStep(sb, "ops-uid", failure)
	for _, want := range []string{"the sandbox is paused again, so no pod of it runs now", "wakes it on a new pod of the new template and runs postUpgrade there", "(stateFilter Paused)"} {
		if !strings.Contains(got, want) {
			t.Errorf("paused: message %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "the pod runs") || strings.Contains(got, "on this pod") {
		t.Errorf("paused: message %q speaks of a pod that is not there", got)
	}
	sb.Spec.Paused = false
	sb.Annotations = map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue("ops-uid")}
	if !upgrade.ChecksPoint(sb, "ops-uid") {
		t.Fatal("the strategy mark does not make the attempt a CheckpointRestore one")
	}
	if got := failureWithNextStep(sb, "ops-uid", failure); strings.Contains(got, "without its workspace restored") || !strings.Contains(got, "resumes it from the failed step") {
		t.Errorf("under CheckpointRestore: %q; its pod holds the checkpoint's workspace, and the retry is the way on", got)
	}
}
