package overhead

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// cpuTime returns the user+system CPU time the process has used
// (/proc/PID/stat).
func cpuTime(fs procfs.FS, pid int) (time.Duration, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(math.Round(st.CPUTime() * float64(time.Second))), nil
}

// memory is a process's resident set, in bytes.
type memory struct {
	RSS  int64 // VmRSS: now
	Peak int64 // VmHWM: the high-water mark since the process started
}

// readMemory reads VmRSS and VmHWM from /proc/PID/status.
func readMemory(fs procfs.FS, pid int) (memory, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return memory{}, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return memory{}, err
	}
	if st.VmRSS == 0 && st.VmHWM == 0 {
		return memory{}, fmt.Errorf("overhead: no VmRSS/VmHWM in /proc/%d/status", pid)
	}
	return memory{RSS: int64(st.VmRSS), Peak: int64(st.VmHWM)}, nil
}

// children returns the PIDs whose parent is pid.
func children(fs procfs.FS, pid int) []int {
	all, _ := fs.AllProcs()
	var out []int
	for _, p := range all {
		if st, err := p.Stat(); err == nil && st.PPID == pid {
			out = append(out, p.PID)
		}
	}
	return out
}

// proc is a child process this package started, measured as a whole:
// with tree set, its children's CPU and memory count too (nginx workers).
type proc struct {
	fs   procfs.FS // /proc
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
	return startEnv(name, addr, tree, nil, bin, args...)
}

// startEnv is start with env added to this process's environment.
func startEnv(name, addr string, tree bool, env []string, bin string, args ...string) (*proc, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{fs: fs, name: name, addr: addr, tree: tree, logs: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
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
		pids = append(pids, children(p.fs, p.cmd.Process.Pid)...)
	}
	return pids
}

// cpu returns the CPU time used so far by the process (tree).
func (p *proc) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range p.pids() {
		c, err := cpuTime(p.fs, pid)
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
		m, err := readMemory(p.fs, pid)
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
