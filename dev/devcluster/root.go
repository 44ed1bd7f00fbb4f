package devcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RepoRoot finds the repository root: the nearest parent holding go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found: no go.work above the working directory")
		}
		dir = parent
	}
}
