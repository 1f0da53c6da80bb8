package slurm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/check"
	"potato-training/lib/config"
)

// A login node the check cannot log in to is named as a slurm backend on
// the report's first line, and every trainer's verdict is that failure.
// Against the real sshd of scripts/test-sshd, whose host potato-test-pw
// asks for a password.
func TestCheckLoginFails(t *testing.T) {
	dir := testcli.SSHD(t)
	c := config.ParseConfig([]byte(fmt.Sprintf(`model_training:
  backends:
    cluster: {type: slurm, host: potato-test-pw, ssh_config: %s/ssh_config, remote_dir: /shared/potato}
`, dir)), t.TempDir())
	if len(c.Problems) > 0 {
		t.Fatal(c.Problems)
	}
	b, _ := c.Backend("cluster")
	r := Check(context.Background(), b, check.Judged{Name: "tfidf-logreg", From: check.FromFlag})
	want := "cluster (slurm via potato-test-pw): ssh to potato-test-pw failed: Permission denied"
	if r.OK || !strings.HasPrefix(r.Summary, want) || len(r.Trainers) == 0 || r.Trainers[0].OK {
		t.Errorf("summary %q, want it to start %q; %+v", r.Summary, want, r)
	}
}
