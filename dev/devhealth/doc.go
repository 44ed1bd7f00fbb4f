// Package devhealth serves /healthz for the local stack's helper commands
// that have no HTTP server of their own (molt-devnode, molt-devruntime), so
// that a container health check (docker-compose.yaml) can ask them through
// the probe command.
package devhealth
