package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
)

// StripManagedFields is an informer transform (the factories' WithTransform)
// that drops metadata.managedFields before an object is cached. No service
// reads them, and they are most of a cached object: about two thirds of a
// Sandbox's bytes and half of a Pod's once statusagg, the patcher and the
// scheduler have written them, so at 10,000 sandboxes they decided whether
// a service stays under 300 MB. Writing back an object read from such a
// cache is safe: the API server keeps the managedFields of an update that
// carries none.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
