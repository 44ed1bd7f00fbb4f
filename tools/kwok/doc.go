// Package tools pins the kwok commands that the Makefile builds into bin/.
package tools
