// Command benchslurm is the workload of scripts/bench-slurm: the delay
// from a SLURM job's start to its first event reaching the dispatch, on
// the single-node SLURM of scripts/test-slurm reached over the test sshd.
//
// The training process writes one event as its first act, stamped with
// its own clock ("t"); the dispatch's events.jsonl is read every 2 ms and
// the delay is the time the line appears there less that stamp (one
// machine, one clock). The agent follows events.jsonl with fsnotify and a
// size poll once a second; -no-inotify turns fsnotify off, to measure the
// poll alone. squeue's poll_interval_s is left at its default of 10 s.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
)

const tb = benchkit.T("benchslurm")

func main() {
	sshConfig := flag.String("F", "", "ssh_config file")
	host := flag.String("host", "", "host alias of the login node")
	slurmConf := flag.String("slurm-conf", "", "SLURM_CONF on the login node")
	bin := flag.String("bin", "bin", "directory of the built binaries")
	work := flag.String("work", "", "a directory the login node's user can read")
	remote := flag.String("remote-dir", "", "remote_dir, owned by the login node's user, not under /tmp")
	n := flag.Int("n", 5, "runs")
	noInotify := flag.Bool("no-inotify", false, "turn the agent's fsnotify off (the size poll alone)")
	flag.Parse()
	dispatch, _ := filepath.Abs(filepath.Join(*bin, "potato-dispatch"))

	proj := filepath.Join(*work, "project")
	os.MkdirAll(proj, 0o755)
	envs := fmt.Sprintf(`SLURM_CONF: "%s"`, *slurmConf)
	if *noInotify {
		envs += `, POTATO_TRAINING_NO_INOTIFY: "1"`
	}
	cfg := testproject.Write(tb, proj, 200, 150, fmt.Sprintf(`  backend: cluster
  backends:
    cluster:
      type: slurm
      host: %s
      ssh_config: %s
      remote_dir: %s
      env: {%s}
`, *host, *sshConfig, *remote, envs))
	trainer := testproject.Trainer(tb, *work, `printf '{"v":1,"event":"status","state":"bench","step":"first event","t":%s}\n' "$(date +%s.%N)"
sleep 1
`+testproject.ResultLines)
	runs := filepath.Join(proj, "annotation_output", "training", "runs")
	var delays []float64
	for i := 0; i < *n+1; i++ {
		d := firstEventDelay(dispatch, cfg, trainer, runs)
		if i == 0 {
			continue // copies the agent to the host: not counted
		}
		delays = append(delays, d)
	}
	sort.Float64s(delays)
	mode := "fsnotify and a 1 s size poll"
	if *noInotify {
		mode = "the 1 s size poll alone"
	}
	var s []string
	for _, d := range delays {
		s = append(s, fmt.Sprintf("%.3f", d))
	}
	fmt.Printf("job start to first relayed event, %s: median %.3f s, max %.3f s over %d runs (poll_interval_s 10)\n",
		mode, delays[len(delays)/2], delays[len(delays)-1], len(delays))
	fmt.Printf("runs (s, sorted): %s\n", strings.Join(s, " "))
}

// firstEventDelay runs one dispatch and returns the seconds between the
// training process's first event and its arrival in the run directory.
func firstEventDelay(dispatch, cfg, trainer, runs string) float64 {
	before, _ := filepath.Glob(filepath.Join(runs, "*"))
	seen := map[string]bool{}
	for _, b := range before {
		seen[b] = true
	}
	cmd := exec.Command(dispatch, "run", cfg, "--trainer", trainer, "--schemas", "sentiment")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	delay := -1.0
	for delay < 0 {
		if time.Since(start) > 3*time.Minute {
			tb.Fatal("no event within 3 minutes")
		}
		paths, _ := filepath.Glob(filepath.Join(runs, "*", "events.jsonl"))
		for _, p := range paths {
			if seen[filepath.Dir(p)] {
				continue
			}
			if t, ok := firstStamp(p); ok {
				delay = float64(time.Now().UnixNano())/1e9 - t
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		tb.Fatal("dispatch: ", err)
	}
	return delay
}

func firstStamp(path string) (float64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"first event"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch t := m["t"].(type) {
		case float64:
			return t, true
		case string:
			v, err := strconv.ParseFloat(t, 64)
			return v, err == nil
		}
	}
	return 0, false
}
