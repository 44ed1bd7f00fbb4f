// Command kubectl-molt is the kubectl plugin of molt: `kubectl molt status`,
// `history`, `plan`, `retry` and `abort`. See internal/molt.
package main

import (
	"os"

	"molt.dev/kubectl-molt/internal/molt"
)

func main() {
	os.Exit(molt.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
