package main

// Attacks on the far side of a run, tried for real: a secret of the
// backend's env looked for in every process's command line on both ends
// of the test sshd and of the real SLURM, and in every file the run
// leaves; a host that planted an agent or a venv for the dispatch to run;
// a host that sends more than it may; a trainer whose predictions name
// items, schemas and labels the project does not have.

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// plantedSecret is an HF_TOKEN no process or file may show.
const plantedSecret = "hf_pl4nt3dS3cr3tN0tOnAnyCommandLine0x5eC"

// argvHolding names the processes of this machine (both ends of the test
// sshd, the SLURM node) whose command line holds secret, the secret
// itself left out; read counts the command lines read.
func argvHolding(secret string) (found []string, read int) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		read++
		if bytes.Contains(b, []byte(secret)) {
			b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte(secret), []byte("<secret>")), []byte{0}, []byte{' '})
			found = append(found, p+": "+string(b))
		}
	}
	return found, read
}

func noArgvHolds(t *testing.T, phase, secret string) {
	t.Helper()
	found, read := argvHolding(secret)
	if read < 10 {
		t.Fatalf("%s: read only %d command lines", phase, read)
	}
	for _, f := range found {
		t.Errorf("%s: the secret is on a command line: %s", phase, f)
	}
}

// filesHolding names the regular files under roots that hold secret.
func filesHolding(secret string, roots ...string) []string {
	var out []string
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// notPrivate names what under root (root itself left out) group or others
// may read, write or enter; symlinks have no mode of their own.
func notPrivate(root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().Perm()&0o077 != 0 {
			out = append(out, fmt.Sprintf("%s %v", p, info.Mode()))
		}
		return nil
	})
	return out
}

func waitFile(t *testing.T, what, path string) {
	t.Helper()
	testproject.WaitFor(t, what, func() bool { _, err := os.Stat(path); return err == nil })
}

func openGate(t *testing.T, gate string) {
	t.Helper()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The backend's env holds HF_TOKEN. While the packages are installed,
// while the trainer runs and while the model is copied back (each phase
// held by a gate), no process of either end has the token on its command
// line; the trainer still gets it in its environment. What the run leaves
// on the host (keep_remote) and here holds no copy of it, and everything
// the run made on the host is private: directories 0700, files 0600.
func testSecretsNeverOnACommandLine(t *testing.T) {
	sd := sshdDir(t)
	progs := testcli.SharedDir(t, 0o755)
	flags := testcli.SharedDir(t, 0o777) // the remote user's marks, the test's gates
	remoteDir := testcli.SharedDir(t, 0o777)
	whl := wheel(t, progs)
	python := filepath.Join(progs, "python3")
	os.WriteFile(python, []byte(`#!/bin/sh
case "$*" in *"-m venv"*) : >`+flags+`/installing; while [ ! -e `+flags+`/gate-install ]; do sleep 0.1; done ;; esac
exec /usr/bin/python3 "$@"
`), 0o755)
	fetchWrapper := filepath.Join(progs, "held-sender")
	os.WriteFile(fetchWrapper, []byte(`#!/bin/sh
: >`+flags+`/fetching
while [ ! -e `+flags+`/gate-fetch ]; do sleep 0.1; done
exec "$@"
`), 0o755)
	tr := testproject.Trainer(t, progs, `echo '{"v":1,"event":"status","state":"fitting","step":"holding"}'
while [ ! -e `+flags+`/gate-train ]; do sleep 0.1; done
mkdir -p artifacts
printf %s "$HF_TOKEN" | sha256sum | cut -c1-64 >artifacts/token.sha
`+testproject.ResultLines)
	e := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir(),
		Env: []string{"POTATO_TRAINING_TEST_FETCH_WRAPPER=" + fetchWrapper}}
	keys := fmt.Sprintf("      env: {PATH: \"/usr/local/bin:/usr/bin:/bin\", HF_TOKEN: %q}\n      python: %s\n      packages: [%q]\n      keep_remote: true\n",
		plantedSecret, python, whl)
	e.Config = testproject.Write(t, e.Dir, 120, 100, testcli.SSHBackend("potato-test", sd+"/ssh_config", remoteDir, 30, keys))
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")

	waitFile(t, "the package install", filepath.Join(flags, "installing"))
	noArgvHolds(t, "package install", plantedSecret)
	openGate(t, filepath.Join(flags, "gate-install"))

	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "holding" })
	noArgvHolds(t, "training", plantedSecret)
	if f := filesHolding(plantedSecret, remoteDir, e.Root().RunDir(id)); len(f) > 0 {
		t.Errorf("files hold the secret during the run: %q", f)
	}
	if bad := notPrivate(remoteDir); len(bad) > 0 {
		t.Errorf("not private on the host during the run (the bundle included):\n%s", strings.Join(bad, "\n"))
	}
	openGate(t, filepath.Join(flags, "gate-train"))

	waitFile(t, "the copy back", filepath.Join(flags, "fetching"))
	noArgvHolds(t, "copy back", plantedSecret)
	openGate(t, filepath.Join(flags, "gate-fetch"))

	info := e.Wait(id, 120*time.Second)
	if info.State != rundir.StateSuccess {
		t.Fatalf("state %s %q\n%s\n%s", info.State, info.Error, e.File(id, "run.log"), e.File(id, "agent.log"))
	}
	sum := sha256.Sum256([]byte(plantedSecret))
	if got := strings.TrimSpace(e.File(id, "artifacts/token.sha")); got != hex.EncodeToString(sum[:]) {
		t.Errorf("the trainer did not get HF_TOKEN in its environment (sha256 %q)", got)
	}
	if _, err := os.Stat(filepath.Join(remoteDir, "jobs", id, "artifacts", "token.sha")); err != nil {
		t.Fatalf("keep_remote: the job directory is gone: %v", err)
	}
	// The project's config holds the secret by the user's choice; the
	// run's directory, the training directory and the host hold none.
	if f := filesHolding(plantedSecret, remoteDir, filepath.Dir(e.Root().RunDir(id))); len(f) > 0 {
		t.Errorf("files the run left hold the secret: %q", f)
	}
	if bad := notPrivate(remoteDir); len(bad) > 0 {
		t.Errorf("not private on the host after the run:\n%s", strings.Join(bad, "\n"))
	}
}

// agentDigest is the sha256 of the agent the dispatch copies to the host.
func agentDigest(t *testing.T, bin string) string {
	b, err := os.ReadFile(filepath.Join(bin, "potato-agent"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// plant writes, owned by uid and gid, a program at path that leaves the
// file marker when it runs; its directories under remote_dir go to the
// same owner, open to all to read, as a user who plants one leaves them.
func plant(t *testing.T, path, marker string, uid, gid int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	testcli.WriteExecutable(t, path, []byte("#!/bin/sh\n: >"+marker+"\nexit 1\n"))
	for p := path; p != filepath.Dir(filepath.Dir(filepath.Dir(path))); p = filepath.Dir(p) {
		os.Chown(p, uid, gid)
	}
}

// What a run reuses under remote_dir is checked before it runs: an agent
// of the login user's that does not match its digest is copied again; an
// agent directory or a venv that another user owns, or that others may
// write to, is refused with the path named, and nothing planted runs.
func testPlantedAgentAndVenv(t *testing.T) {
	uid, gid := testcli.RemoteIDs(t)
	cases := []struct {
		name string
		// where is the path of the planted program, given remote_dir and
		// the agent's digest; uid and gid own it and its directories,
		// and dirMode, unless 0, is its directory's mode.
		where     func(root, sum string) string
		uid, gid  int
		dirMode   os.FileMode
		packages  bool
		wantLog   string
		wantState string
	}{
		{name: "stale agent of the user's", where: func(root, sum string) string { return root + "/code/" + sum + "/potato-agent" },
			uid: uid, gid: gid, wantLog: "does not match its digest: copying it again", wantState: rundir.StateSuccess},
		{name: "agent of another user", where: func(root, sum string) string { return root + "/code/" + sum + "/potato-agent" },
			uid: 0, gid: 0, wantLog: "belongs to another user or others may write to it: refusing to run the agent from it", wantState: rundir.StateError},
		{name: "agent others may replace", where: func(root, sum string) string { return root + "/code/" + sum + "/potato-agent" },
			uid: uid, gid: gid, dirMode: 0o777, wantLog: "belongs to another user or others may write to it: refusing to run the agent from it", wantState: rundir.StateError},
		{name: "venv of another user", packages: true, where: func(root, sum string) string {
			return root + "/" + venvNameOf("/usr/bin/python3", "potatotestpkg") + "/bin/python"
		},
			uid: 0, gid: 0, wantLog: "belongs to another user or others may write to it: refusing to run its Python", wantState: rundir.StateError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sd := sshdDir(t)
			remoteDir := testcli.UserDir(t, "/tmp")
			e := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir()}
			keys := "      python: /usr/bin/python3\n"
			if c.packages {
				keys += "      packages: [potatotestpkg]\n"
			}
			e.Config = testproject.Write(t, e.Dir, 120, 100, testcli.SSHBackend("potato-test", sd+"/ssh_config", remoteDir, 30, keys))
			marker := filepath.Join(testcli.SharedDir(t, 0o777), "planted-ran")
			path := c.where(remoteDir, agentDigest(t, e.Bin))
			plant(t, path, marker, c.uid, c.gid)
			if c.dirMode != 0 {
				os.Chmod(filepath.Dir(path), c.dirMode)
			}
			r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
			info := e.Info(r.ID)
			log := e.File(r.ID, "run.log")
			if info.State != c.wantState || !strings.Contains(log, c.wantLog) {
				t.Errorf("state %s, want %s; run log lacks %q:\n%s", info.State, c.wantState, c.wantLog, log)
			}
			if c.wantState == rundir.StateError && !strings.Contains(log, `"`+remoteDir+"/") {
				t.Errorf("the refusal does not name what it found under %s:\n%s", remoteDir, log)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the planted program ran")
			}
		})
	}
}

// venvNameOf is the ssh backend's name of the venv of python and packages.
func venvNameOf(python string, packages ...string) string {
	sum := sha256.Sum256([]byte(python + "\x00" + strings.Join(packages, "\x00")))
	return "venv-" + hex.EncodeToString(sum[:6])
}

// A hostile host answers the copy back with its own stream (through the
// test build's seam around the remote sender): it announces a total of
// a petabyte and sends more than max_fetch_mb in files each under
// max_artifact_mb; or it announces a file sent apart and then sends
// without end. Either copy stops at this side's bounds, the run fails
// saying so, and artifacts/ holds no more than the bound.
func testHostileCopyBack(t *testing.T) {
	for _, c := range []struct{ name, sender, want string }{
		{"past max_fetch_mb", `import sys, tarfile, io
out = sys.stdout.buffer
tw = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)
g = tarfile.TarInfo("tree"); g.type = tarfile.XGLTYPE; g.pax_headers = {"POTATO.total": str(10**15)}
tw.addfile(g)
for i in range(8):
    ti = tarfile.TarInfo("part%d.bin" % i); ti.size = 600000
    tw.addfile(ti, io.BytesIO(b"x" * ti.size))
tw.close()
`, "the stream expands past the limit of 1048576 bytes"},
		{"a file sent apart without end", `import sys, tarfile
if "--file" in sys.argv:
    chunk = b"y" * 65536
    while True:
        sys.stdout.buffer.write(chunk)
out = sys.stdout.buffer
tw = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)
g = tarfile.TarInfo("tree"); g.type = tarfile.XGLTYPE; g.pax_headers = {"POTATO.total": "100"}
tw.addfile(g)
ti = tarfile.TarInfo("model.bin"); ti.pax_headers = {"POTATO.direct": "100"}
tw.addfile(ti)
tw.close()
`, "a file grew past the size the host announced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sd := sshdDir(t)
			progs := testcli.SharedDir(t, 0o755)
			sender := filepath.Join(progs, "hostile-sender")
			testcli.WriteExecutable(t, sender, []byte("#!/usr/bin/python3\n"+c.sender))
			remoteDir := testcli.SharedDir(t, 0o777)
			e := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir(),
				Env: []string{"POTATO_TRAINING_TEST_FETCH_WRAPPER=" + sender, "POTATO_TRAINING_TEST_RSYNC=never"}}
			e.Config = testproject.Write(t, e.Dir, 120, 100, testcli.SSHBackend("potato-test", sd+"/ssh_config", remoteDir, 30,
				"      max_artifact_mb: 1\n      max_fetch_mb: 1\n"))
			tr := testproject.Trainer(t, progs, testproject.ResultLines)
			r := e.Run("--trainer", tr, "--schemas", "sentiment")
			info := e.Info(r.ID)
			log := e.File(r.ID, "run.log")
			if info.State != rundir.StateError || !strings.Contains(log, c.want) {
				t.Errorf("state %s, run log lacks %q:\n%s", info.State, c.want, log)
			}
			var total int64
			filepath.WalkDir(filepath.Join(e.Root().RunDir(r.ID), "artifacts"), func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if i, err := d.Info(); err == nil {
						total += i.Size()
					}
				}
				return nil
			})
			if total > 1<<20 {
				t.Errorf("artifacts/ holds %d bytes, over max_fetch_mb", total)
			}
		})
	}
}

// A trainer's predictions name an item the project does not have, a
// schema and a label it does not have, confidences outside [0, 1] or not
// numbers, and a null confidence under min_confidence 0.5. Only the good
// ones reach Potato's store; the rest are counted in the run log and the
// record, and no row names the unknown item (Potato would stop its
// start-up replay there).
func testHostilePredictions(t *testing.T) {
	e := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir()}
	e.Config = testproject.Write(t, e.Dir, 40, 20, "  backend: local\n")
	lines := []string{
		`{"instance_id":"r31","schema_name":"sentiment","payload":{"label":"positive","confidence":0.9},"confidence":0.9}`,
		`{"instance_id":"r32","schema_name":"sentiment","payload":{"label":"negative"},"confidence":0.7}`,
		`{"instance_id":"no-such-item","schema_name":"sentiment","payload":{"label":"positive"},"confidence":0.9}`,
		`{"instance_id":"r33","schema_name":"no-such-schema","payload":{"label":"positive"},"confidence":0.9}`,
		`{"instance_id":"r34","schema_name":"sentiment","payload":{"label":"<img src=x>"},"confidence":0.9}`,
		`{"instance_id":"r35","schema_name":"sentiment","payload":{"label":"positive"},"confidence":1.5}`,
		`{"instance_id":"r36","schema_name":"sentiment","payload":{"label":"positive"},"confidence":"high"}`,
		`{"instance_id":"r37","schema_name":"sentiment","payload":{"label":"positive","confidence":-3},"confidence":0.9}`,
		`{"instance_id":"r38","schema_name":"sentiment","payload":{"label":["positive","negative"]},"confidence":0.9}`,
		`{"instance_id":"r39","schema_name":"sentiment","payload":null,"confidence":0.9}`,
		`{"instance_id":"r40","schema_name":"sentiment","payload":{"label":"positive"},"confidence":null}`,
	}
	progs := t.TempDir()
	preds := filepath.Join(progs, "predictions.jsonl")
	os.WriteFile(preds, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	tr := testproject.Trainer(t, progs, `mkdir -p artifacts; cp `+preds+` artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl","n_predictions":11}'`)
	r := e.Run("--trainer", tr, "--schemas", "sentiment")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.Code, r.Stderr, e.File(r.ID, "run.log"))
	}
	log := e.File(r.ID, "run.log")
	if !strings.Contains(log, "2 of 11 predictions written as prelabels") || !strings.Contains(log, "1 below min_confidence 0.5") ||
		!strings.Contains(log, "8 refused") || !strings.Contains(log, `warning: 8 predictions refused`) {
		t.Errorf("run log:\n%s", log)
	}
	if got := e.Info(r.ID).Writeback["n_refused"]; got != 8 {
		t.Errorf("record: n_refused %d, want 8", got)
	}
	db, err := sql.Open("sqlite", filepath.Join(e.Dir, writeback.StoreName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT instance_id FROM training_predictions ORDER BY instance_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		got = append(got, id)
	}
	if strings.Join(got, " ") != "r31 r32" {
		t.Errorf("prelabels stored for %q, want r31 and r32 only", got)
	}
}

// TestRemoteSecurity runs the attacks on the far side over the test sshd,
// one after the other, beside the other backends' groups.
func TestRemoteSecurity(t *testing.T) {
	testcli.Group(t, []testcli.Case{
		{Name: "TestSecretsNeverOnACommandLine", Run: testSecretsNeverOnACommandLine},
		{Name: "TestPlantedAgentAndVenv", Run: testPlantedAgentAndVenv},
		{Name: "TestHostileCopyBack", Run: testHostileCopyBack},
		{Name: "TestHostilePredictions", Run: testHostilePredictions},
	})
}

// The same secret through the real SLURM: the backend's env reaches the
// job from job.env, mode 0600, which is gone once the job has left the
// queue; job.sh, which sbatch keeps, never holds it, nor does any command
// line on the login node or the compute node while the job runs; what the
// job directory keeps (keep_remote) is private and holds no copy.
func testRealSLURMSecretNeverOnACommandLine(t *testing.T) {
	c := realSLURM(t)
	e := slurmSetup(t, c, "      keep_remote: true\n")
	cfg, _ := os.ReadFile(e.Config)
	os.WriteFile(e.Config, bytes.Replace(cfg, []byte("      env: {"), []byte(fmt.Sprintf("      env: {HF_TOKEN: %q, ", plantedSecret)), 1), 0o644)
	flags := testcli.SharedDir(t, 0o755)
	tr := testproject.Trainer(t, testcli.UserDir(t, "/tmp"), `echo '{"v":1,"event":"status","state":"fitting","step":"holding"}'
while [ ! -e `+flags+`/gate ]; do sleep 0.1; done
mkdir -p artifacts
printf %s "$HF_TOKEN" | sha256sum | cut -c1-64 >artifacts/token.sha
`+testproject.ResultLines)
	id := e.Detach("--trainer", tr, "--schemas", "sentiment")
	e.waitJob(id)
	testproject.WaitFor(t, "the trainer", func() bool { return e.Info(id).Step == "holding" })
	noArgvHolds(t, "the SLURM job", plantedSecret)
	job := filepath.Join(e.remoteDir, "jobs", id)
	if st, err := os.Stat(filepath.Join(job, "job.env")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("job.env while the job runs: %v %v", st, err)
	}
	if f := filesHolding(plantedSecret, e.remoteDir); len(f) != 1 || filepath.Base(f[0]) != "job.env" {
		t.Errorf("files holding the secret while the job runs: %q, want job.env alone", f)
	}
	if bad := notPrivate(e.remoteDir); len(bad) > 0 {
		t.Errorf("not private on the cluster during the job:\n%s", strings.Join(bad, "\n"))
	}
	openGate(t, filepath.Join(flags, "gate"))
	info := e.wait(id)
	if info.State != rundir.StateSuccess {
		t.Fatalf("state %s %q\n%s", info.State, info.Error, e.dump(id))
	}
	sum := sha256.Sum256([]byte(plantedSecret))
	if got := strings.TrimSpace(e.File(id, "artifacts/token.sha")); got != hex.EncodeToString(sum[:]) {
		t.Errorf("the job did not get HF_TOKEN in its environment (sha256 %q)", got)
	}
	if _, err := os.Stat(filepath.Join(job, "job.sh")); err != nil {
		t.Fatalf("keep_remote: the job directory is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(job, "job.env")); !os.IsNotExist(err) {
		t.Errorf("job.env is left after the job: %v", err)
	}
	if f := filesHolding(plantedSecret, e.remoteDir, filepath.Dir(e.Root().RunDir(id))); len(f) > 0 {
		t.Errorf("files the run left hold the secret: %q", f)
	}
	if bad := notPrivate(e.remoteDir); len(bad) > 0 {
		t.Errorf("not private on the cluster after the job:\n%s", strings.Join(bad, "\n"))
	}
}
