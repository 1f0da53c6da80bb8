package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"potato-training/lib/agentproto"
)

// bundleCache is where bundles are kept by their SHA-256,
// WORKDIR/bundles/SHA256.tar.gz, so that a job claimed again after the
// agent restarted, or another run of the same data, is not downloaded
// again. A job's bundle leaves the cache when its result is in, unless
// --keep.
const bundleCache = "bundles"

func cachedBundle(workdir, sha string) string {
	return filepath.Join(workdir, bundleCache, strings.ToLower(sha)+".tar.gz")
}

// fetchBundle returns the bundle of a claim from the cache when a file of
// the right size and digest is there, else downloads it into the cache.
func (j *job) fetchBundle(ctx context.Context) (string, error) {
	want := j.claim.Bundle
	if b, err := hex.DecodeString(want.SHA256); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("the claim's bundle sha256 %q is not 64 hex digits", want.SHA256)
	}
	path := cachedBundle(j.o.Workdir, want.SHA256)
	if hasDigest(path, want) {
		touch(path)
		j.fetched = true
		j.a.o.logf("run %s: bundle %.12s cached by digest: not downloaded again", j.claim.RunID, want.SHA256)
		j.emit(agentLine(j.o.named("the bundle is cached by digest on this machine: not downloaded again")))
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	err := j.o.Client.DownloadBundle(ctx, j.claim.RunID, path, want, func(done, total int64) { j.a.heard() })
	if err != nil {
		return "", err
	}
	j.fetched = true
	return path, nil
}

// CacheAge is how long a cached bundle no job has used stays: one whose
// job's result never came back (the agent was killed) is removed at a
// start this long after.
const CacheAge = 7 * 24 * time.Hour

// pruneCache removes the cached bundles not used for age, and partial
// downloads.
func pruneCache(workdir string, age time.Duration) {
	dir := filepath.Join(workdir, bundleCache)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if strings.HasSuffix(e.Name(), ".part") || time.Since(fi.ModTime()) > age {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// hasDigest reports whether path holds want's bytes.
func hasDigest(path string, want agentproto.BundleInfo) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != want.Bytes {
		return false
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return strings.EqualFold(hex.EncodeToString(h.Sum(nil)), want.SHA256)
}
