//go:build tools

// Package tools records the nats CLI built from this module.
package tools

import _ "github.com/nats-io/natscli/nats"
