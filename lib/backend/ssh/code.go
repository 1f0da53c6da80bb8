// The copy of the agent: the potato-agent built for the host's
// architecture, its digest, and its upload to remote_dir/code/<sha256>/.

package ssh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"potato-training/lib/trainer"
)

// agentBinary is the potato-agent built for the host's architecture: the
// cross-built copy of the build tree (bin/linux-ARCH/potato-agent) or of an
// installation (PREFIX/lib/potato-training/linux-ARCH/potato-agent), or
// this machine's own when the architectures match.
func agentBinary(goarch string) (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			dir := filepath.Dir(self)
			for _, p := range []string{
				filepath.Join(dir, "linux-"+goarch, "potato-agent"),
				filepath.Join(dir, "..", "lib", "potato-training", "linux-"+goarch, "potato-agent"),
			} {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		}
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == goarch {
		return trainer.FindProgram("potato-agent")
	}
	return "", fmt.Errorf("no potato-agent built for linux/%s: run make build", goarch)
}

// agentFile is an agent binary and its sha256.
type agentFile struct {
	path, sum string
	err       error
}

func findAgent(goarch string) agentFile {
	p, err := agentBinary(goarch)
	if err != nil {
		return agentFile{err: err}
	}
	sum, err := fileSHA256(p)
	return agentFile{path: p, sum: sum, err: err}
}

func goarchOf(unameM string) (string, error) {
	switch unameM {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("no potato-agent for a %s host", unameM)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyCode puts the agent in remote_dir/code/<sha256>/ when the host does
// not have that version yet (SPEC S1): uploaded under a temporary name,
// then renamed into place.
func (s *execution) copyCode(ctx context.Context) error {
	goarch, err := goarchOf(s.facts.Arch)
	if err != nil {
		return err
	}
	// The probe asked about this machine's agent; an agent of another
	// architecture is asked about here.
	a, asked := <-s.localAgent, goarch == runtime.GOARCH
	s.localAgent <- a
	if !asked {
		a = findAgent(goarch)
	}
	if a.err != nil {
		return a.err
	}
	local, sum := a.path, a.sum
	rootPath := strings.TrimSuffix(s.b.RemoteDir, "/")
	s.jobPath = rootPath + "/jobs/" + s.run.Dir.ID
	s.codeDir = remoteWord(rootPath + "/code/" + sum)
	s.jobDir = remoteWord(s.jobPath)
	code := s.code
	if !asked {
		out, _, err := s.conn.Run(ctx, "sh -s", strings.NewReader(reuseFuncs+codeCheck(rootPath, sum)))
		if err != nil {
			return err
		}
		code = reuseOf(out, codeMark)
	}
	switch code.state {
	case reuseOK:
		s.run.Sink.Logf("code %s is on %s already", sum[:12], s.b.Host)
		return nil
	case reuseBad:
		return fmt.Errorf(msgNotOurs, code.bad, s.b.Host, "the agent from it")
	case reuseStale, reuseNoSum:
		why := "does not match its digest"
		if code.state == reuseNoSum {
			why = "cannot be checked (no sha256sum or shasum)"
		}
		s.run.Sink.Logf("the agent in %s/code/%s on %s %s: copying it again", rootPath, sum[:12], s.b.Host, why)
		if _, _, err := s.conn.Run(ctx, "rm -rf "+s.codeDir, nil); err != nil {
			return err
		}
	}
	s.run.Sink.Step(fmt.Sprintf(stepCopyCode, s.b.Host))
	// sshx quotes the paths it is given itself; the shell commands here
	// get shell words, "$HOME"/... for a path under ~/.
	tmpPath := rootPath + "/code/.tmp-" + sum[:12] + "-" + randHex(4)
	tmp := remoteWord(tmpPath)
	if _, _, err := s.conn.Run(ctx, "umask 077 && mkdir -p "+tmp, nil); err != nil {
		return err
	}
	if err := s.conn.Upload(ctx, local, tmpPath+"/potato-agent", 0o700, testRsync()); err != nil {
		_, _, _ = s.conn.Run(ctx, "rm -rf "+tmp, nil)
		return fmt.Errorf("copying the agent to %s: %w", s.b.Host, err)
	}
	// Another run may have put the same version in place meanwhile.
	mv := "mv " + tmp + " " + s.codeDir + " 2>/dev/null || { test -x " + s.codeDir + "/potato-agent && rm -rf " + tmp + "; }"
	if _, _, err := s.conn.Run(ctx, mv, nil); err != nil {
		return err
	}
	s.run.Sink.Logf("copied Potato's code (%s) to %s", sum[:12], s.b.Host)
	return nil
}
