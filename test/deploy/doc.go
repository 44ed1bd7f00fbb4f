// Package deploy tests the files of deploy/ and docker-compose.yaml as the
// tools that read them do, without running those tools: the Grafana
// dashboard through the Grafana Foundation SDK's strict decoder and every
// panel's query through Prometheus's PromQL parser, the ServiceMonitors and
// the PrometheusRule through the Prometheus Operator's types (the
// PrometheusRule against deploy/prometheus/rules.yaml, which it is generated
// from), the compose file through compose-go, as `docker compose` loads it,
// and deploy/nats's nats.conf (alone and with deploy/components/nats-tls)
// through nats-server's own config parser, as three in-process nodes that
// must form their cluster and refuse a route without the route password.
//
// It is its own module, outside go.work, so that these heavy test-only
// dependencies never reach a service's build: `make test-deploy` runs it
// with GOWORK=off.
package deploy
