// Package controller is the one informer → workqueue → sync loop molt's
// services use, shaped like kubernetes/sample-controller: event handlers only
// enqueue a key, workers start after the caches have synced, and one function
// owns Done / Forget / AddRateLimited. A service supplies only
// sync(ctx, key) error.
package controller
