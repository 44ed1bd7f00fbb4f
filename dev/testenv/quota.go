package testenv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetQuota creates or updates the ResourceQuota name in ns with hard, writes
// its status (hard, used) as the quota controller would (the test cluster
// runs none), and waits until the API server's quota admission answers from
// that status: it reads quotas through its own informer, so a dry run made
// at once may still see the old one. hard may limit only pods and
// requests.cpu (the probe asks for CPU alone).
func (e *Env) SetQuota(t testing.TB, ns, name string, hard, used corev1.ResourceList) {
	t.Helper()
	if _, ok := hard[corev1.ResourceRequestsCPU]; !ok {
		t.Fatalf("SetQuota %s/%s: hard must limit requests.cpu (the probe that tells when admission reads the status asks for CPU)", ns, name)
	}
	for res := range hard {
		if _, ok := used[res]; !ok || (res != corev1.ResourcePods && res != corev1.ResourceRequestsCPU) {
			t.Fatalf("SetQuota %s/%s: %s: hard may limit only pods and requests.cpu, and used must give each (admission refuses a quota whose status leaves one out)", ns, name, res)
		}
	}
	ctx := context.Background()
	quotas := e.Kube.CoreV1().ResourceQuotas(ns)
	q, err := quotas.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		q, err = quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("resource quota %s/%s: %v", ns, name, err)
	}
	q.Spec.Hard = hard
	if q, err = quotas.Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update resource quota %s/%s: %v", ns, name, err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	if _, err := quotas.UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write status of resource quota %s/%s: %v", ns, name, err)
	}
	// A pod asking for more CPU than any quota holds is refused for its CPU,
	// and for its count if the quota is full to the pod: the words list
	// those, with the status's used and hard amounts.
	want := quotaWords(hard, used)
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "quota-probe-", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.example/probe:v1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100000")}}}}}}
	Eventually(t, 30*time.Second, "quota admission reads resource quota "+ns+"/"+name, func() (bool, error) {
		_, err := e.Kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, fmt.Errorf("the probe asking 100000 cpu was accepted")
		}
		return strings.Contains(err.Error(), want), fmt.Errorf("probe refused with %q, want %q", err.Error(), want)
	})
}

// quotaWords is the end of quota admission's refusal of the probe under
// hard and used: the resources it exceeds, with their used and hard amounts.
func quotaWords(hard, used corev1.ResourceList) string {
	var names []corev1.ResourceName
	for name := range hard {
		pods := used[corev1.ResourcePods]
		full := name == corev1.ResourcePods && pods.Value()+1 > hard.Name(corev1.ResourcePods, resource.DecimalSI).Value()
		if name == corev1.ResourceRequestsCPU || full {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	list := func(l corev1.ResourceList) string {
		parts := make([]string, 0, len(names))
		for _, name := range names {
			v := l[name]
			parts = append(parts, fmt.Sprintf("%s=%s", name, v.String()))
		}
		return strings.Join(parts, ",")
	}
	return "used: " + list(used) + ", limited: " + list(hard)
}
