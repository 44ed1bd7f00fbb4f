package devruntime

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	processpb "molt.dev/pkg/agentruntime/gen/process"
)

// DefaultRetention is how long a tagged process's events are kept after it
// ended, for a caller that Connects to it late (a hookrunner that restarted
// while its hook ran).
const DefaultRetention = time.Hour

// historyLimit bounds the output a process keeps for callers that attach
// later; past it the oldest output is dropped (the tail is what matters).
const historyLimit = 1 << 20

// process is one command started through Start, and every event it has
// produced so far: start, data, then one end. Callers attach to it and read
// the events from any position; a tagged process outlives its callers.
type process struct {
	tag string
	pid uint32
	cmd *command

	mu sync.Mutex
	// events[i] is event number base+i; the oldest data events are
	// dropped when the output exceeds historyLimit.
	events    []*processpb.ProcessEvent
	base      int
	dataBytes int
	ended     bool
	endedAt   time.Time
	// changed is closed (and replaced) whenever events grows.
	changed chan struct{}
}

// newProcess records a started command and pumps its output and end into
// the process's events until it ended.
func newProcess(cmd *command, tag string) *process {
	p := &process{tag: tag, pid: uint32(cmd.cmd.Process.Pid), cmd: cmd, changed: make(chan struct{})}
	p.append(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}})
	go p.pump()
	return p
}

// pump reads the command's output until it exited and its pipes drained,
// then appends the end event.
func (p *process) pump() {
	var readers sync.WaitGroup
	readers.Add(2)
	go p.read(p.cmd.stdout, &readers, func(b []byte) *processpb.ProcessEvent_DataEvent {
		return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	})
	go p.read(p.cmd.stderr, &readers, func(b []byte) *processpb.ProcessEvent_DataEvent {
		return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	})
	_ = p.cmd.cmd.Wait()
	// A process the command left behind may hold the pipes open.
	deadline := time.Now().Add(drainGrace)
	_ = p.cmd.stdout.SetReadDeadline(deadline)
	_ = p.cmd.stderr.SetReadDeadline(deadline)
	readers.Wait()
	closeAll(p.cmd.stdout, p.cmd.stderr)
	code, exited, status := exitOf(p.cmd.cmd.ProcessState)
	p.append(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: code, Exited: exited, Status: status}}})
}

func (p *process) read(f *os.File, wg *sync.WaitGroup, wrap func([]byte) *processpb.ProcessEvent_DataEvent) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.append(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: wrap(append([]byte(nil), buf[:n]...))}})
		}
		if err != nil {
			return
		}
	}
}

func (p *process) append(ev *processpb.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
	if d := ev.GetData(); d != nil {
		p.dataBytes += len(d.GetStdout()) + len(d.GetStderr())
		// Drop the oldest output (never the start event) past the limit.
		for p.dataBytes > historyLimit && len(p.events) > 2 {
			old := p.events[1].GetData()
			p.dataBytes -= len(old.GetStdout()) + len(old.GetStderr())
			p.events = append(p.events[:1], p.events[2:]...)
			p.base++
		}
	}
	if ev.GetEnd() != nil {
		p.ended, p.endedAt = true, time.Now()
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// next returns the events from position from on (a position before the
// oldest kept one reads from the oldest), the position after them, and a
// channel closed when there are more.
func (p *process) next(from int) ([]*processpb.ProcessEvent, int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from == 0 {
		// A new reader always gets the start event first.
		out := append([]*processpb.ProcessEvent(nil), p.events...)
		return out, p.base + len(p.events), p.changed
	}
	i := max(from-p.base, 1)
	if i >= len(p.events) {
		return nil, from, p.changed
	}
	out := append([]*processpb.ProcessEvent(nil), p.events[i:]...)
	return out, p.base + len(p.events), p.changed
}

// signal sends sig to the process and whatever it started, unless it ended.
func (p *process) signal(sig os.Signal) error {
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended {
		return errProcessEnded
	}
	return p.cmd.signal(sig)
}

var errProcessEnded = errors.New("the process has already ended")

// processes is the process table of one target: every untagged process
// while it runs, and every tagged one until Retention after its end.
type processes struct {
	retention time.Duration

	mu    sync.Mutex
	byPID map[uint32]*process
	byTag map[string]*process
}

func newProcesses(retention time.Duration) *processes {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &processes{retention: retention, byPID: map[uint32]*process{}, byTag: map[string]*process{}}
}

// errTagInUse is Start's answer for a tag a running or retained process has.
type errTagInUse struct{ tag string }

func (e errTagInUse) Error() string {
	return fmt.Sprintf("a process tagged %q already exists: Connect to it instead of starting it again", e.tag)
}

// reserve claims tag for a process about to start; release undoes it when
// the start failed.
func (t *processes) reserve(tag string) error {
	if tag == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	if _, ok := t.byTag[tag]; ok {
		return errTagInUse{tag}
	}
	t.byTag[tag] = nil
	return nil
}

func (t *processes) release(tag string) {
	if tag == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byTag[tag] == nil {
		delete(t.byTag, tag)
	}
}

// add records p under its pid and (reserved) tag.
func (t *processes) add(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byPID[p.pid] = p
	if p.tag != "" {
		t.byTag[p.tag] = p
	}
}

// forget drops an untagged process once its caller is done with it.
func (t *processes) forget(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID[p.pid] == p {
		delete(t.byPID, p.pid)
	}
}

// find returns the process sel names, nil when there is none.
func (t *processes) find(sel *processpb.ProcessSelector) *process {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	if tag := sel.GetTag(); tag != "" {
		return t.byTag[tag]
	}
	return t.byPID[sel.GetPid()]
}

// expireLocked drops tagged processes that ended more than retention ago.
func (t *processes) expireLocked() {
	now := time.Now()
	for tag, p := range t.byTag {
		if p == nil {
			continue
		}
		p.mu.Lock()
		expired := p.ended && now.Sub(p.endedAt) > t.retention
		p.mu.Unlock()
		if expired {
			delete(t.byTag, tag)
			if t.byPID[p.pid] == p {
				delete(t.byPID, p.pid)
			}
		}
	}
}

// killAll kills every process still running: the pod they ran for is gone.
func (t *processes) killAll() {
	t.mu.Lock()
	all := make([]*process, 0, len(t.byPID))
	for _, p := range t.byPID {
		all = append(all, p)
	}
	t.mu.Unlock()
	for _, p := range all {
		_ = p.signal(os.Kill)
	}
}
