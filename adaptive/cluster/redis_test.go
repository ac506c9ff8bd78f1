package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicehq/sluice/internal/testutil"
)

// redisServer is a real redis-server on a loopback port, started by the
// test (no persistence), stopped at cleanup.
type redisServer struct {
	t      testing.TB
	port   int
	args   []string // more arguments to redis-server (startRedisWith)
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// startRedis starts redis-server on a free loopback port. Without the
// binary the test fails in CI (CI=true; make test installs it) and is
// skipped elsewhere with a message saying how to get it. A test that
// starts one is a process-level test.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	return startRedisWith(t)
}

// startRedisWith is startRedis with more arguments to redis-server
// ("--requirepass", "pw").
func startRedisWith(t testing.TB, args ...string) *redisServer {
	t.Helper()
	testutil.Process(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found: CI must install it (make test does, with apt-get)")
		}
		t.Skip("redis-server not found; `make test` installs Debian's package, or apt-get install redis-server")
	}
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		r := &redisServer{t: t, port: port, args: args}
		if r.start() == nil {
			t.Cleanup(r.stop)
			return r
		}
	}
	t.Fatal("could not start redis-server")
	return nil
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// password is the server's --requirepass, "" without one.
func (r *redisServer) password() string {
	for i, a := range r.args {
		if a == "--requirepass" && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// start runs the server on r.port and waits until it answers PING.
func (r *redisServer) start() error {
	r.cmd = exec.Command("redis-server", append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning"}, r.args...)...)
	if err := r.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	r.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(r.cmd)
	c := redis.NewClient(&redis.Options{Addr: r.addr(), Password: r.password(), MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		select {
		case <-exited:
			// It could not listen (the port was taken meanwhile): a PING
			// that succeeds would be somebody else's server.
			r.cmd = nil
			return fmt.Errorf("redis-server on port %d exited", r.port)
		default:
		}
		if err == nil {
			return nil
		}
	}
	r.stop()
	return fmt.Errorf("redis-server on port %d did not answer", r.port)
}

// stop kills the server (its state is lost: no persistence).
func (r *redisServer) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// restart starts a fresh, empty server on the same port.
func (r *redisServer) restart() {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := r.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("restart redis: %v", err)
		}
	}
}

// client returns a client with the short timeouts Sluice uses.
func (r *redisServer) client(t testing.TB) *redis.Client {
	c := newTestClient(r.addr())
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, DialerRetries: 1, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}
