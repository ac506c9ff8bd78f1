package overhead

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime returns the user+system CPU time the process has used, read from
// /proc/PID/stat (fields 14 and 15, in clock ticks).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// parseStat extracts utime+stime from the contents of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces, so fields
// are counted after the last ')'.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("overhead: malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("overhead: short /proc/PID/stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("overhead: bad utime/stime in /proc/PID/stat")
	}
	return time.Duration(u+s) * clockTick, nil
}

// memory is a process's resident set, in bytes.
type memory struct {
	RSS  int64 // VmRSS: now
	Peak int64 // VmHWM: the high-water mark since the process started
}

func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	return parseStatus(b)
}

// parseStatus reads VmRSS and VmHWM (kB) from /proc/PID/status.
func parseStatus(b []byte) (memory, error) {
	var m memory
	found := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("overhead: /proc/PID/status %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.Peak = n << 10
		}
		found++
	}
	if found != 2 {
		return m, errors.New("overhead: VmRSS/VmHWM not found in /proc/PID/status")
	}
	return m, nil
}

// children returns the PIDs whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// proc is a child process this package started, measured as a whole:
// with tree set, its children's CPU and memory count too (nginx workers).
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port it serves on
	tree bool
	logs *bytes.Buffer
	done chan struct{}
	err  error
}

// start runs name with args, stdout and stderr captured, and waits until
// addr accepts connections (or the process exits, or 15 s pass).
func start(name, addr string, tree bool, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, addr: addr, tree: tree, logs: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before serving: %v\n%s", name, p.err, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s: not serving on %s after 15 s\n%s", name, addr, p.logs.String())
		}
	}
}

// pids returns the process and, for a tree, its children.
func (p *proc) pids() []int {
	pids := []int{p.cmd.Process.Pid}
	if p.tree {
		pids = append(pids, children(p.cmd.Process.Pid)...)
	}
	return pids
}

// cpu returns the CPU time used so far by the process (tree).
func (p *proc) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range p.pids() {
		c, err := cpuTime(pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		sum += c
	}
	return sum, nil
}

// memory returns the summed RSS and high-water marks of the process (tree).
func (p *proc) memory() (memory, error) {
	var sum memory
	for _, pid := range p.pids() {
		m, err := readMemory(pid)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", p.name, err)
		}
		sum.RSS += m.RSS
		sum.Peak += m.Peak
	}
	return sum, nil
}

// stop sends SIGTERM and, after 5 s, SIGKILL; it returns once the process
// has exited.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// raiseFileLimit raises this process's open-file limit (soft and hard) to
// at least n, so that it and the children it starts (which inherit it) can
// hold n sockets. It returns the limit in force afterwards.
func raiseFileLimit(n uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	want := lim
	want.Cur = max(lim.Cur, n)
	want.Max = max(lim.Max, n)
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return want.Cur
	}
	// Not allowed to raise the hard limit: take what it allows, and set it
	// explicitly so that children inherit it (Go restores the original
	// soft limit in children otherwise).
	want = lim
	want.Cur = lim.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}
