package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
)

// Pod ranges of test environments: 127.<octet>.0.0/16 for an octet in
// [firstPodOctet, firstPodOctet+podOctets). `make up` uses 127.100.0.0/16.
const (
	firstPodOctet = 101
	podOctets     = 150
)

// podRange is a pod range reserved for one environment: the development
// agent-runtime listens on every pod IP's :49983, so two environments on one
// range (test packages run side by side) would serve each other's pods.
type podRange struct {
	octet int
	lock  *os.File // holds an exclusive flock while the range is in use
}

// CIDR is the range in the form kwok's --cidr takes.
func (r *podRange) CIDR() string { return fmt.Sprintf("127.%d.0.1/16", r.octet) }

// release gives the range back. The lock file stays: removing it would let an
// environment that opened it just before lock a file no other one can see.
func (r *podRange) release() { _ = r.lock.Close() }

// reservePodRange takes the first free range from a random start (so that
// environments starting together rarely try the same one), holding an
// exclusive, non-blocking flock on its lock file in os.TempDir() until
// release; the kernel drops it if the process dies.
func reservePodRange() (*podRange, error) {
	dir := os.TempDir()
	start := rand.IntN(podOctets)
	for i := range podOctets {
		octet := firstPodOctet + (start+i)%podOctets
		path := podRangeLock(dir, octet)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o666)
		if err != nil {
			return nil, fmt.Errorf("open pod range lock %s: %w", path, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &podRange{octet: octet, lock: f}, nil
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock pod range %s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("every pod range 127.%d-%d.0.0/16 is held by another test environment (lock files %s): too many run at once, or a stuck one holds them",
		firstPodOctet, firstPodOctet+podOctets-1, podRangeLock(dir, "*"))
}

// podRangeLock is the lock file of the range 127.<octet>.0.0/16 in dir.
func podRangeLock(dir string, octet any) string {
	return filepath.Join(dir, fmt.Sprintf("molt-testenv-podrange-127.%v.lock", octet))
}
