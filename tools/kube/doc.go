// Package tools pins the kube commands that the Makefile builds into bin/.
package tools
