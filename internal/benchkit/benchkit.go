// Package benchkit holds what the workloads of scripts/bench-* share: a
// testproject.T that ends the command, a process's CPU time and memory
// from /proc, and potato-server started on a free loopback port.
package benchkit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/testproject"
)

// T is a testproject.T for a command: Fatal prints its arguments after
// the command's name and exits with status 1.
type T string

func (T) Helper() {}

func (t T) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{string(t) + ":"}, args...)...)
	os.Exit(1)
}

func (t T) Fatalf(format string, args ...any) { t.Fatal(fmt.Sprintf(format, args...)) }

// ClockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux.
const ClockTick = 100

// CPUTicks is a process's utime+stime, in clock ticks; an unreadable
// /proc/PID/stat ends the command.
func CPUTicks(t T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, field 2, may hold spaces: count from its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// Share is ticks of CPU time over d as a percentage of one core.
func Share(ticks int64, d time.Duration) float64 {
	return 100 * float64(ticks) / ClockTick / d.Seconds()
}

// StatusKB is a "Name: N kB" line of /proc/PID/status, such as VmHWM;
// without it the command ends.
func StatusKB(t T, pid int, name string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// Quantile is the nearest-rank q-quantile of sorted values.
func Quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Median is the median of values, in any order (the upper one of an even
// count).
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Server is a potato-server process.
type Server struct {
	Cmd  *exec.Cmd
	Addr string
	log  *os.File
}

// StartServer starts bin/potato-server on cfg on a free loopback port,
// its output in dir/server.log, and waits until it listens.
func StartServer(t T, bin, cfg, dir string) *Server {
	lf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd, addr := testproject.StartServer(t, bin, cfg, lf)
	return &Server{Cmd: cmd, Addr: addr, log: lf}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.Cmd.Process.Pid }

// Stop ends the server with SIGTERM, or SIGKILL after 10 s.
func (s *Server) Stop() {
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-done
	}
	s.log.Close()
}
