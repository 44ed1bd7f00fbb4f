package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// withConnError adds to err, which a JetStream call through js returned, what js's NATS
// connection last reported, when that is the likely cause and err cannot say it:
//   - the connection is not connected: a refused password keeps it reconnecting for ever,
//     and every call only times out;
//   - err is a timeout and the server last refused a subject to this user: a refused
//     request is answered by nobody.
//
// Both errors stay matchable with errors.Is; the message says that a permissions
// violation may be an earlier call's. A nil err stays nil.
func withConnError(js jetstream.JetStream, err error) error {
	if err == nil {
		return nil
	}
	nc := js.Conn()
	if nc == nil {
		return err
	}
	status, last := nc.Status(), nc.LastError()
	switch {
	case status != nats.CONNECTED && last != nil:
		return fmt.Errorf("%w (NATS connection %s, last error: %w)", err, status, last)
	case status != nats.CONNECTED:
		return fmt.Errorf("%w (NATS connection %s)", err, status)
	case errors.Is(last, nats.ErrPermissionViolation) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)):
		// The violation may be an earlier call's: said as a likely cause.
		return fmt.Errorf("%w (the NATS server refused this user a subject earlier on this connection, perhaps this call's: %w)", err, last)
	}
	return err
}
