package testenv

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// Two environments never get one range, and a released range is free again.
// (Not tested: every range taken. Holding them all would fail the test
// environments of packages running beside this one.)
func TestPodRangesAreExclusive(t *testing.T) {
	a, err := reservePodRange()
	if err != nil {
		t.Fatal(err)
	}
	b, err := reservePodRange()
	if err != nil {
		a.release()
		t.Fatal(err)
	}
	defer b.release()
	if a.octet == b.octet {
		t.Errorf("two reservations got 127.%d.0.0/16", a.octet)
	}
	for _, r := range []*podRange{a, b} {
		if r.octet < firstPodOctet || r.octet >= firstPodOctet+podOctets {
			t.Errorf("reserved 127.%d.0.0/16, outside 127.%d-%d", r.octet, firstPodOctet, firstPodOctet+podOctets-1)
		}
	}
	if got, want := a.CIDR(), fmt.Sprintf("127.%d.0.1/16", a.octet); got != want {
		t.Errorf("CIDR() = %q, want %q", got, want)
	}

	a.release()
	path := podRangeLock(os.TempDir(), a.octet)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("lock %s after release: %v, want it free", path, err)
	}
}
