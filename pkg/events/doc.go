// Package events is how molt's five services talk: CloudEvents on one JetStream stream, one
// subject per sandbox, read through one durable pull consumer per service.
//
// # Wire format
//
// Every message is a CloudEvent 1.0 in structured JSON mode: the NATS body is the whole event
// (specversion, id, source, type, subject, time, datacontenttype, data) with the header
// Content-Type: application/cloudevents+json. Structured mode was chosen over binary mode
// (ce-* headers) because `nats stream view`, `nats sub` and `nats stream get` print the body
// and only optionally the headers: an operator reading one sandbox's history sees every
// attribute, and a message copied out of the stream is self-contained. The model is sdk-go's
// event.Event (github.com/cloudevents/sdk-go/v2/event); transport is nats.go's jetstream
// package directly (sdk-go's JetStream protocol still uses the legacy JetStreamContext).
//
//   - type: reverse-DNS and versioned, one of the Type constants (dev.molt.sandbox.*.v1).
//   - subject: the sandbox, <namespace>/<name>.
//   - source: the producing service (Publisher's source), e.g. "patcher".
//   - id: MessageID, a hash of (ops uid, sandbox uid, attempt, type, stage); also sent as
//     Nats-Msg-Id, so a handler that is redelivered and publishes again is deduplicated by
//     the stream's duplicate window (2 minutes by default).
//   - data: Data — ops {name, uid}, sandbox {namespace, name, uid}, attempt, stage, reason
//     and message for failures, and optional stage fields (target revision, pod UIDs, hook
//     exit code).
//
// # Subjects
//
// molt.<namespace>.<sandbox>.<event token>, with namespace and name escaped by EncodeToken
// (a dot becomes %2E), so one sandbox's history is one wildcard away:
//
//	nats stream view MOLT_EVENTS --subject 'molt.team-a.sbx%2E1.>'
//	nats stream subjects MOLT_EVENTS 'molt.team-a.>'
//
// SandboxHistorySubject builds that filter. The tokens (requested, patched, prehook-done,
// pod-ready, posthook-done, failed, stage-started) are dot-free.
//
// # Stream and consumers
//
// EnsureStream and EnsureConsumer create the stream MOLT_EVENTS (file storage, limits by age
// and size, a duplicate window) and the durable pull consumers patcher, hookrunner,
// podcycler and statusagg, each filtered to the event types its service reacts to
// (FilterSubjects). All replicas of a service share its consumer. The selector only
// publishes (requested); it reads how attempts end from the Sandbox status.
//
// They create, and never update: a stream or consumer that exists is kept as it runs, so an
// operator's replicas, limits or ack wait survive every restart. A field that differs from
// molt's config is reported, as a log line and as molt_events_config_drift{object, name,
// field} = 1, not overwritten. Two exceptions: a consumer's filter subjects are set to
// FilterSubjects (they are the contract between the services), and a stream none of whose
// subjects lies within molt.> is refused at start-up. A consumer created on a stream that
// already holds history starts at most ConsumerConfig.ReplayWindow (1 hour) back.
//
// Endpoint.Consume survives the stream or its consumer being deleted: it creates them anew
// with the same config and consumes on, pausing 1s to 30s between attempts.
//
// # Publishing and consuming
//
// Publisher.Publish waits for the stream's acknowledgement. Consume runs a service's handler:
// per-subject order, bounded parallelism across sandboxes, InProgress while a handler runs,
// and one function (classify) that turns the handler's result into Ack, Nak with a delay, or
// Term. See Handler for the contract.
//
// Dead messages (undecodable, Permanent, or out of deliveries) are terminated, counted in
// molt_events_handled_total{result=poison|permanent|exhausted}, logged with their stream
// sequence, and passed to the OnTerminated callback. They are not republished to a
// dead-letter subject: with limits retention the original stays in the stream
// (`nats stream get MOLT_EVENTS <seq>`), the server's MSG_TERMINATED advisory carries the
// reason, and a copy under molt.> would be delivered to statusagg's molt.> consumer again.
//
// Metrics are registered on a Registerer the service passes to NewMetrics.
package events
