// Package service is the start-up and shutdown frame every molt service shares:
// it turns common flags into connections to Kubernetes and NATS JetStream,
// serves /healthz, /readyz and /metrics, and reports ready only while both
// dependencies answer. A service's own Run function builds on the Runtime it
// returns; the service-specific work (informers, consumers) stays in the
// service's internal package.
package service
