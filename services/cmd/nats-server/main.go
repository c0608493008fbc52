// Command nats-server is the NATS server of the chart's image: nats-server itself (the
// github.com/nats-io/nats-server/v2 server package, same flags) under a supervisor that restarts
// it in place when it exits on its own.
//
// The nats-reloader sidecar restarts the server when the accounts change shape (a reload does not
// rewire imports and exports): it sends SIGTERM to the pid in the server's pid file. With the
// server as the container's process, each such restart was a container exit, and the kubelet's
// crash-loop back-off (10 s doubling to 5 min, reset only after 10 minutes up) held NATS down for
// minutes once a few accounts had changed within ten minutes (the cluster e2e's first-install
// path: 2 min 40 s, then 5 min). Here the container's process is the supervisor; the server is
// its child and writes its own pid file, so the reloader's SIGTERM stops only the child, which
// the supervisor starts again at once. A signal to the supervisor (the kubelet's SIGTERM) is
// passed to the server and, for SIGTERM, SIGINT and SIGUSR2 (lame duck), ends both. A server that keeps failing
// (five non-zero exits within two minutes) ends the supervisor with its exit code, so the kubelet
// sees a real crash loop.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// childEnv marks the process that runs the server.
const childEnv = "OBSCURA_NATS_SERVER_CHILD"

func main() {
	if os.Getenv(childEnv) == "1" || oneShot(os.Args[1:]) {
		runServer(os.Args[1:])
		return
	}
	os.Exit(supervise(os.Args[1:]))
}

// oneShot reports whether args ask for something that exits at once (version, help, a config
// check): no supervision.
func oneShot(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		switch a {
		case "-v", "--version", "-version", "-h", "--help", "-help", "-t", "--test-config", "-help_tls", "--help_tls":
			return true
		}
		return false
	})
}

// runServer is nats-server's own start-up: flags and config file, the server, its logger, and
// the server's signal handling (SIGTERM/SIGINT shut down, SIGHUP reloads, SIGUSR2 lame duck).
func runServer(args []string) {
	const exe = "nats-server"
	fs := flag.NewFlagSet(exe, flag.ExitOnError)
	opts, err := server.ConfigureOptions(fs, args, server.PrintServerAndExit, fs.Usage, server.PrintTLSHelpAndDie)
	if err != nil {
		server.PrintAndDie(fmt.Sprintf("%s: %s", exe, err))
	}
	if opts.CheckConfig {
		fmt.Fprintf(os.Stderr, "%s: configuration file %s is valid (%s)\n", exe, opts.ConfigFile, opts.ConfigDigest())
		os.Exit(0)
	}
	server.RedactArgs(os.Args)
	s, err := server.NewServer(opts)
	if err != nil {
		server.PrintAndDie(fmt.Sprintf("%s: %s", exe, err))
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		server.PrintAndDie(err.Error())
	}
	s.WaitForShutdown()
}

// Crash handling: after failures within crashWindow the supervisor gives up, and waits
// between restarts after a failure (a clean exit, the reloader's restart, restarts at once).
const (
	failures    = 5
	crashWindow = 2 * time.Minute
	failWait    = time.Second
)

// supervise runs the server as a child until the supervisor is told to stop, and returns the
// exit code for the container.
func supervise(args []string) int {
	logf := log.New(os.Stderr, "nats-supervisor: ", log.LstdFlags|log.LUTC).Printf
	self, err := os.Executable()
	if err != nil {
		logf("%v", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	var failed []time.Time
	for {
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		// The server dies with the supervisor, whatever ends it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf("start nats-server: %v", err)
			return 1
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		stopping := false
		var werr error
	wait:
		for {
			select {
			case s := <-sigs:
				// SIGTERM and SIGINT stop the server, SIGUSR2 drains it (lame duck) and then
				// stops it: either way the container is going away.
				if s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGUSR2 {
					stopping = true
				}
				_ = cmd.Process.Signal(s)
			case werr = <-done:
				break wait
			}
		}
		code := exitCode(werr)
		if stopping {
			return code
		}
		if code == 0 {
			logf("nats-server (pid %d) exited; starting it again", cmd.Process.Pid)
			continue
		}
		now := time.Now()
		failed = append(slices.DeleteFunc(failed, func(t time.Time) bool { return now.Sub(t) > crashWindow }), now)
		if len(failed) >= failures {
			logf("nats-server failed %d times within %s (last: %v); giving up", len(failed), crashWindow, werr)
			return code
		}
		logf("nats-server (pid %d) failed: %v; starting it again in %s", cmd.Process.Pid, werr, failWait)
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				return code
			}
		case <-time.After(failWait):
		}
	}
}

// exitCode is the exit status of a finished child: 0, its code, or 128 + the signal that
// ended it.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
