// Command benchscale is the workload of scripts/bench-scale: it grows the
// tests' real corpus (testdata/spamassassin, 500 emails) into a Potato
// project of N items by copying emails under new ids, then times one
// end-to-end `potato training run --trainer tfidf-logreg --backend local`
// over it and measures the peak resident memory of the dispatch and of
// the training process apart.
//
//	benchscale gen -dir DIR -n N -labelled L   write the project
//	benchscale run -dir DIR -bin BIN           run it and print one line
//	benchscale ref -dir DIR                    the reference: read the data
//	                                           file with encoding/json
//
// The training process's peak and CPU time are exact: run replaces potato-agent, the
// worker the local backend starts, with a script that runs the real one
// under /usr/bin/time. The dispatch's is its VmHWM read from /proc every
// 10 ms while it lives (wait4's figure for it would count its children).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
)

const tb = benchkit.T("benchscale")

func main() {
	if len(os.Args) < 2 {
		tb.Fatal("usage: benchscale gen|run [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "", "project directory")
	n := fs.Int("n", 10000, "items (gen)")
	labelled := fs.Int("labelled", 5000, "labelled items (gen)")
	root := fs.String("root", ".", "the repository (gen: its testdata)")
	bin := fs.String("bin", "bin", "the built binaries (run)")
	schemas := fs.String("schemas", "spam", "schemas to train (run)")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "gen":
		gen(*dir, *root, *n, *labelled)
	case "run":
		run(*dir, *bin, *schemas)
	case "ref":
		ref(*dir)
	default:
		tb.Fatalf("unknown mode %q", os.Args[1])
	}
}

// gen writes a project of n items: the corpus's emails again and again,
// the k-th copy of an email with id "ID~k", the first labelled of them
// labelled as testproject.WriteEmails does (schemas spam and signals).
func gen(dir, root string, n, labelled int) {
	emails := testproject.Emails(tb, root)
	all := make([]testproject.Email, n)
	for i := range all {
		e := emails[i%len(emails)]
		if k := i / len(emails); k > 0 {
			e.ID += "~" + strconv.Itoa(k)
		}
		all[i] = e
	}
	testproject.WriteEmails(tb, dir, all, labelled, "")
}

// run times one run over the project in dir and prints
//
//	items N wall_s S items_per_s R worker_rss_kb K dispatch_rss_kb K
//	worker_cpu_s S dispatch_cpu_s S predictions P data_kb K
func run(dir, bin, schemas string) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		tb.Fatal(err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		tb.Fatal(err)
	}
	// A bin directory of our own: potato and potato-dispatch copied (the
	// dispatch finds potato-agent beside its own resolved path), and a
	// potato-agent that runs the real one under /usr/bin/time.
	wbin := filepath.Join(dir, "bench-bin")
	if err := os.MkdirAll(wbin, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, name := range []string{"potato", "potato-dispatch"} {
		copyFile(filepath.Join(bin, name), filepath.Join(wbin, name))
	}
	rssFile := filepath.Join(dir, "worker.rss")
	os.Remove(rssFile)
	script := fmt.Sprintf("#!/bin/sh\nexec /usr/bin/time -f '%%M %%U %%S' -o '%s' '%s' \"$@\"\n", rssFile, filepath.Join(bin, "potato-agent"))
	if err := os.WriteFile(filepath.Join(wbin, "potato-agent"), []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	cmd := exec.Command(filepath.Join(wbin, "potato"), "training", "run", cfg,
		"--trainer", "tfidf-logreg", "--backend", "local", "--schemas", schemas)
	cmd.Env = append(os.Environ(), "PATH="+wbin+":"+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// potato execs potato-dispatch: the same pid.
	var hwm int64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-tick.C:
			hwm = max(hwm, vmHWM(cmd.Process.Pid))
		}
	}
	wall := time.Since(start)
	if err != nil {
		tb.Fatalf("potato training run: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(rssFile)
	if err != nil {
		tb.Fatalf("no peak of the training process: %v", err)
	}
	// The last line: a killed process's has a line before it.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var worker int64
	var wuser, wsys float64
	if _, err := fmt.Sscanf(lines[len(lines)-1], "%d %f %f", &worker, &wuser, &wsys); err != nil {
		tb.Fatalf("%s: %q: %v", rssFile, b, err)
	}
	// wait4's times count the dispatch's children, the worker among them.
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	id := strings.TrimSpace(stdout.String())
	info := testproject.Read(tb, dir, id)
	if string(info.State) != "success" {
		tb.Fatalf("run %s: %s: %s", id, info.State, info.Error)
	}
	items, preds := countLines(filepath.Join(dir, "data", "emails.jsonl")), countLines(filepath.Join(testproject.Root(dir).Dir, "runs", id, "predictions.jsonl"))
	fmt.Printf("items %d wall_s %.2f items_per_s %.0f worker_rss_kb %d dispatch_rss_kb %d worker_cpu_s %.2f dispatch_cpu_s %.2f predictions %d data_kb %d\n",
		items, wall.Seconds(), float64(items)/wall.Seconds(), worker, hwm, wuser+wsys, total-wuser-wsys, preds, fileKB(filepath.Join(dir, "data", "emails.jsonl")))
}

// ref reads the project's data file as the least reader of it must:
// encoding/json, one object a line.
func ref(dir string) {
	f, err := os.Open(filepath.Join(dir, "data", "emails.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 64<<20)
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	fmt.Printf("ref_items %d ref_s %.2f\n", n, time.Since(start).Seconds())
}

func fileKB(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return st.Size() >> 10
}

// vmHWM is a process's peak resident set in kB, 0 once it is gone.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func copyFile(from, to string) {
	in, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, 1<<20)
	n := 0
	for {
		k, err := r.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			return n
		}
	}
}
