// Package tools pins the nats commands that the Makefile builds into bin/.
package tools
