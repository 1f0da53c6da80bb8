package testcli

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The test SLURM takes a GPU job from an ordinary user over the test sshd,
// as the SLURM backend will submit one: the job completes and the
// scheduler hands it one of the fake GPUs.
func TestSLURMGPUJobOverSSH(t *testing.T) {
	sshd := SSHD(t)
	slurm := SLURM(t)
	env := "SLURM_CONF=" + filepath.Join(slurm, "slurm.conf") + " "
	remote := func(cmd string) (string, error) {
		out, err := exec.Command("ssh", "-F", filepath.Join(sshd, "ssh_config"), "potato-test", cmd).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}

	jobDir, err := remote(`mktemp -d "$HOME/potato-slurm-test.XXXXXX"`)
	if err != nil {
		t.Fatalf("mktemp over ssh: %v: %s", err, jobDir)
	}
	t.Cleanup(func() { remote("rm -rf '" + jobDir + "'") })

	id, err := remote(env + "sbatch --parsable --gres=gpu:1 --time=2 --chdir='" + jobDir +
		`' --output=slurm.out --wrap 'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}" >cvd'`)
	if err != nil || !regexp.MustCompile(`^[0-9]+$`).MatchString(id) {
		t.Fatalf("sbatch: %v: %q", err, id)
	}
	t.Cleanup(func() { remote(env + "scancel " + id) })

	stateRe := regexp.MustCompile(`JobState=(\S+)`)
	var state, show string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		show, err = remote(env + "scontrol show job " + id)
		if err != nil {
			t.Fatalf("scontrol show job %s: %v: %s", id, err, show)
		}
		if m := stateRe.FindStringSubmatch(show); m != nil {
			state = m[1]
		}
		if state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is still %s after 2 minutes:\n%s", id, state, show)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if state != "COMPLETED" {
		out, _ := remote("cat '" + jobDir + "/slurm.out'")
		t.Fatalf("job %s ended %s, want COMPLETED:\n%s\nslurm.out:\n%s", id, state, show, out)
	}
	cvd, err := remote("cat '" + jobDir + "/cvd'")
	if err != nil {
		t.Fatalf("the job wrote no cvd: %v: %s", err, cvd)
	}
	if !regexp.MustCompile(`^CUDA_VISIBLE_DEVICES=[0-9]$`).MatchString(cvd) {
		t.Errorf("the job saw %q, want CUDA_VISIBLE_DEVICES=0 or 1", cvd)
	}
}
