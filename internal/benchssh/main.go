// Command benchssh is the workload of scripts/bench-ssh, against an ssh
// host given by an ssh_config file and a host alias:
//
//	P1 = time from "potato-dispatch run" to the first event of a no-op
//	     training process on the host, with the agent's code already
//	     there, over the time of "ssh host true";
//	P2 = the throughput of the model's copy back (sshx.Conn.Fetch, called
//	     as the backend's Collect calls it) of a 500 MB file, over that of
//	     "ssh host cat file >/dev/null".
//
// Each figure is the median of -n runs; the reference runs alternate with
// the measured ones, so both see the same machine. Where rsync is
// installed, rsync through the same master, the copy back the backend used
// before Fetch, is measured in the same rounds for comparison.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	flag.Parse()
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
	for i := 0; i < *n; i++ {
		ref1 = append(ref1, timeCmd("ssh", "-F", *sshConfig, *host, "true"))
		p1 = append(p1, firstEvent(dispatch, cfg, trainer, runs))
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
	var p2, ref2, rs []float64
	size := float64(*mb)
	for i := 0; i < *n; i++ {
		ref2 = append(ref2, size/timeCmd("sh", "-c", "ssh -F "+*sshConfig+" "+*host+" cat "+big+" >/dev/null"))
		dst := filepath.Join(*work, fmt.Sprint("copy", i))
		// As Collect calls it: the default max_artifact_mb, a progress
		// callback that formats the step line at most every 250 ms, the
		// stall watchdog.
		last, steps := time.Time{}, 0
		t0 := time.Now()
		err := conn.Fetch(ctx, shell.Quote(agents[0]), src, dst, sshx.FetchOptions{
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
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		p2 = append(p2, size/time.Since(t0).Seconds())
		if st, err := os.Stat(filepath.Join(dst, "model.bin")); err != nil || st.Size() != int64(*mb)<<20 || steps == 0 {
			fmt.Fprintf(os.Stderr, "the copy is wrong: %v %v, %d progress steps\n", st, err, steps)
			os.Exit(1)
		}
		os.RemoveAll(dst)
		// rsync through the same master, as the backend used it before.
		if _, err := exec.LookPath("rsync"); err != nil {
			continue
		}
		t0 = time.Now()
		if out, err := exec.Command("rsync", "-a", "--no-owner", "--no-group", "--whole-file", "--checksum-choice=none",
			"--info=progress2", "--no-inc-recursive", "--max-size=2147483648", "-e",
			"ssh -S "+conn.ControlPath()+" -o ControlMaster=no -F "+*sshConfig, "--", *host+":"+src+"/", dst+"/").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "rsync: %v %s", err, out)
			os.Exit(1)
		}
		rs = append(rs, size/time.Since(t0).Seconds())
		os.RemoveAll(dst)
	}
	fmt.Printf("P1 first event %.3f s / ssh true %.3f s = %.2f (target at most 3)\n", benchkit.Median(p1), benchkit.Median(ref1), benchkit.Median(p1)/benchkit.Median(ref1))
	fmt.Printf("P2 copy back %.0f MB/s / ssh cat %.0f MB/s = %.2f (target at least 0.9)\n", benchkit.Median(p2), benchkit.Median(ref2), benchkit.Median(p2)/benchkit.Median(ref2))
	if len(rs) > 0 {
		fmt.Printf("rsync through the master %.0f MB/s / ssh cat = %.2f (for comparison)\n", benchkit.Median(rs), benchkit.Median(rs)/benchkit.Median(ref2))
	}
	fmt.Printf("runs: %d each; P1 %s; ssh true %s\n", *n, list(p1), list(ref1))
	fmt.Printf("P2 %s MB/s; ssh cat %s MB/s; rsync %s MB/s\n", list(p2), list(ref2), list(rs))
}

func list(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.3g", x))
	}
	return strings.Join(s, " ")
}
