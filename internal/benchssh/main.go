// Command benchssh is the workload of scripts/bench-ssh, against an ssh
// host given by an ssh_config file and a host alias:
//
//	P1 = time from "potato-dispatch run" to the first event of a no-op
//	     training process on the host, with the agent's code already
//	     there, over the time of "ssh host true" (target at most 2);
//	P2 = the throughput of the model's copy back (sshx.Conn.Fetch, called
//	     as the backend's Collect calls it) of a 500 MB file, over that of
//	     "ssh host cat file >/dev/null" (target at least 0.95), by the
//	     agent's tar stream, a first copy's way, and by rsync, both; and
//	     over "ssh host cat file >local-file" too, which, like the copy
//	     back, writes the 500 MB to this machine's disk;
//	resume = the bytes the next copy back receives, by rsync, after a
//	     dropped link cut the first (its ssh client killed halfway through
//	     the file), over the bytes the first had not brought (target at
//	     most 1.05).
//
// Each figure is the median of -n runs; the reference runs alternate with
// the measured ones, so both see the same machine.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
	"potato-training/lib/config"
	"potato-training/lib/shell"
	"potato-training/lib/sshx"
)

const tb = benchkit.T("benchssh")

func timeCmd(name string, args ...string) float64 {
	t0 := time.Now()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %v: %v\n%s", name, args, err, out)
		os.Exit(1)
	}
	return time.Since(t0).Seconds()
}

// firstEvent runs a dispatch and returns the seconds until events.jsonl
// has its first line.
func firstEvent(dispatch, cfg, trainer, runs string) float64 {
	before, _ := filepath.Glob(filepath.Join(runs, "*"))
	cmd := exec.Command(dispatch, "run", cfg, "--trainer", trainer, "--schemas", "sentiment")
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var first float64
	for first == 0 {
		after, _ := filepath.Glob(filepath.Join(runs, "*", "events.jsonl"))
		for _, p := range after {
			if st, err := os.Stat(p); err == nil && st.Size() > 0 && !contains(before, filepath.Dir(p)) {
				first = time.Since(t0).Seconds()
			}
		}
		if time.Since(t0) > 2*time.Minute {
			fmt.Fprintln(os.Stderr, "no event within 2 minutes")
			os.Exit(1)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch:", err)
		os.Exit(1)
	}
	return first
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func main() {
	sshConfig := flag.String("F", "", "ssh_config file")
	host := flag.String("host", "", "host alias")
	bin := flag.String("bin", "bin", "directory of the built binaries")
	work := flag.String("work", "", "a directory every user can read and write")
	n := flag.Int("n", 5, "runs of each")
	mb := flag.Int("mb", 500, "size of the copied file")
	n1 := flag.Int("n1", -1, "runs of P1, when not -n")
	flag.Parse()
	if *n1 < 0 {
		*n1 = *n
	}
	dispatch, _ := filepath.Abs(filepath.Join(*bin, "potato-dispatch"))

	// P1.
	proj := filepath.Join(*work, "project")
	remote := filepath.Join(*work, "remote")
	os.MkdirAll(proj, 0o755)
	os.MkdirAll(remote, 0o777)
	os.Chmod(remote, 0o777)
	cfg := testproject.Write(tb, proj, 200, 150, fmt.Sprintf(`  backend: gpu
  backends:
    gpu:
      type: ssh
      host: %s
      ssh_config: %s
      remote_dir: %s
`, *host, *sshConfig, remote))
	trainer := testproject.Trainer(tb, *work, `echo '{"v":1,"event":"status","state":"noop","step":"no-op"}'
`+testproject.ResultLines)
	runs := filepath.Join(proj, "annotation_output", "training", "runs")
	firstEvent(dispatch, cfg, trainer, runs) // copies the code: not counted
	var p1, ref1 []float64
	for i := 0; i < *n1; i++ {
		ref1 = append(ref1, timeCmd("ssh", "-F", *sshConfig, *host, "true"))
		p1 = append(p1, firstEvent(dispatch, cfg, trainer, runs))
	}

	if *n <= 0 && len(p1) > 0 {
		fmt.Printf("P1 first event %.3f s / ssh true %.3f s = %.2f (target at most 2)\n", benchkit.Median(p1), benchkit.Median(ref1), benchkit.Median(p1)/benchkit.Median(ref1))
		return
	}

	// P2.
	src := filepath.Join(*work, "model")
	os.MkdirAll(src, 0o755)
	big := filepath.Join(src, "model.bin")
	if out, err := exec.Command("dd", "if=/dev/urandom", "of="+big, "bs=1M", fmt.Sprint("count=", *mb)).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "dd: %v %s", err, out)
		os.Exit(1)
	}
	os.Chmod(big, 0o644)
	ctx := context.Background()
	b := &config.Backend{Host: *host, SSHConfig: *sshConfig}
	conn, err := sshx.Dial(ctx, sshx.TargetOf(b), "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	// The remote potato-agent that P1's runs copied to the host, as the
	// backend's Collect finds it.
	agents, _ := filepath.Glob(filepath.Join(remote, "code", "*", "potato-agent"))
	if len(agents) != 1 {
		fmt.Fprintf(os.Stderr, "want one remote potato-agent, have %v\n", agents)
		os.Exit(1)
	}
	var tarRate, rsRate, ref2, ref2File []float64
	size := float64(*mb)
	// fetch copies src as Collect does: the default max_artifact_mb, a
	// progress callback that formats the step line at most every 250 ms,
	// the stall watchdog; it checks the copy.
	fetch := func(how sshx.Rsync, dst string) float64 {
		last, steps := time.Time{}, 0
		t0 := time.Now()
		err := conn.Fetch(ctx, shell.Quote(agents[0]), src, dst, sshx.FetchOptions{
			Rsync:        how,
			MaxSizeMB:    2048,
			StallTimeout: 180 * time.Second,
			Progress: func(done, total int64) {
				if time.Since(last) < 250*time.Millisecond && done < total {
					return
				}
				last = time.Now()
				_ = fmt.Sprintf("copying the model from %s: %d MB of %d MB", *host, done>>20, total>>20)
				steps++
			},
		})
		if err != nil {
			tb.Fatal(err)
		}
		d := time.Since(t0).Seconds()
		if st, err := os.Stat(filepath.Join(dst, "model.bin")); err != nil || st.Size() != int64(*mb)<<20 || steps == 0 {
			tb.Fatalf("the copy is wrong: %v %v, %d progress steps", st, err, steps)
		}
		os.RemoveAll(dst)
		return size / d
	}
	_, lerr := exec.LookPath("rsync")
	rsyncHere := lerr == nil
	catTo := func(out string) float64 {
		r := size / timeCmd("sh", "-c", "ssh -F "+*sshConfig+" "+*host+" cat "+big+" >"+out)
		if out != "/dev/null" {
			os.Remove(out)
		}
		return r
	}
	catFile := filepath.Join(*work, "cat.bin")
	for i := 0; i < *n; i++ {
		if i%2 == 0 {
			ref2 = append(ref2, catTo("/dev/null"))
			ref2File = append(ref2File, catTo(catFile))
		} else {
			ref2File = append(ref2File, catTo(catFile))
			ref2 = append(ref2, catTo("/dev/null"))
		}
		dst := filepath.Join(*work, fmt.Sprint("copy", i))
		if i%2 == 1 && rsyncHere {
			rsRate = append(rsRate, fetch(sshx.RsyncAlways, dst))
		}
		tarRate = append(tarRate, fetch(sshx.RsyncNever, dst))
		if i%2 == 0 && rsyncHere {
			rsRate = append(rsRate, fetch(sshx.RsyncAlways, dst))
		}
	}
	ratio := func(xs []float64) float64 { return benchkit.Median(xs) / benchkit.Median(ref2) }
	if len(p1) > 0 {
		fmt.Printf("P1 first event %.3f s / ssh true %.3f s = %.2f (target at most 2)\n", benchkit.Median(p1), benchkit.Median(ref1), benchkit.Median(p1)/benchkit.Median(ref1))
	}
	fmt.Printf("P2 copy back by tar stream (as Collect copies) %.0f MB/s / ssh cat %.0f MB/s = %.2f (target at least 0.95)\n", benchkit.Median(tarRate), benchkit.Median(ref2), ratio(tarRate))
	fmt.Printf("  the same over ssh cat to a local file, as the copy back writes one, %.0f MB/s: %.2f\n", benchkit.Median(ref2File), benchkit.Median(tarRate)/benchkit.Median(ref2File))
	if rsyncHere {
		fmt.Printf("P2 copy back by rsync, whole file (rsync carries the resumed copies) %.0f MB/s / ssh cat %.0f MB/s = %.2f (target at least 0.95)\n", benchkit.Median(rsRate), benchkit.Median(ref2), ratio(rsRate))
		resume(conn, agents[0], src, filepath.Join(*work, "resume"), int64(*mb)<<20)
	} else {
		fmt.Println("P2 copy back by rsync, and resume: no rsync on this machine")
	}
	fmt.Printf("runs: P1 %d, P2 %d; P1 %s s; ssh true %s s\n", *n1, *n, list(p1), list(ref1))
	fmt.Printf("P2 tar %s MB/s; rsync %s MB/s; ssh cat %s MB/s; ssh cat to a file %s MB/s\n", list(tarRate), list(rsRate), list(ref2), list(ref2File))
}

// resume measures a copy back that a dropped link cut: as Collect makes
// it (the tar stream), its ssh client killed once the temporary file holds
// half the model; a second Fetch resumes, by rsync, from the part kept,
// and rsync's count of the bytes it received is set against the bytes the
// part lacked.
func resume(conn *sshx.Conn, agent, src, dst string, size int64) {
	ctx := context.Background()
	marker := fmt.Sprintf("potato-bench-drop-%d", os.Getpid())
	var kept int64
	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		for {
			tmps, _ := filepath.Glob(filepath.Join(dst, ".model.bin.*"))
			for _, p := range tmps {
				if st, err := os.Stat(p); err == nil && st.Size() >= size/2 {
					killSSH(marker)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	err := conn.Fetch(ctx, shell.Quote(agent), src, dst, sshx.FetchOptions{Prefix: ": " + marker + "; "})
	<-dropped
	if err == nil {
		tb.Fatal("the copy ended before the link was dropped")
	}
	st, err := os.Stat(filepath.Join(dst, sshx.PartialDir, "model.bin"))
	if err != nil {
		tb.Fatalf("no part kept after the dropped link: %v", err)
	}
	kept = st.Size()
	var wire int64 = -1
	method := ""
	if err := conn.Fetch(ctx, shell.Quote(agent), src, dst, sshx.FetchOptions{
		Using: func(m string) { method = m },
		Wire:  func(n int64) { wire = n },
	}); err != nil {
		tb.Fatal(err)
	}
	if method != "rsync" {
		tb.Fatalf("the copy after the cut went by %s, not rsync", method)
	}
	if st, err := os.Stat(filepath.Join(dst, "model.bin")); err != nil || st.Size() != size {
		tb.Fatalf("the resumed copy is wrong: %v %v", st, err)
	}
	os.RemoveAll(dst)
	missing := size - kept
	fmt.Printf("resume: %.1f MB received by rsync for the %.1f MB the cut copy lacked = %.3f (target at most 1.05; the tar stream cut at %.0f MB of %.0f by killing its ssh client)\n",
		float64(wire)/(1<<20), float64(missing)/(1<<20), float64(wire)/float64(missing), float64(kept)/(1<<20), float64(size)/(1<<20))
}

// killSSH kills this machine's ssh clients whose command line holds s.
func killSSH(s string) {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(b, []byte("ssh\x00")) && bytes.Contains(b, []byte(s)) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func list(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.3g", x))
	}
	return strings.Join(s, " ")
}
