// Package bundle builds, packs and safely unpacks the training bundle
// described in potato-rundir(5).
//
// A bundle is a directory: manifest.json, one <split>.jsonl per configured
// split (and unlabeled.jsonl when enabled), and media/<2 hex>/<basename>.
// Writer builds one, Pack and PackFile turn it into a deterministic tar.gz,
// Unpack and UnpackFile extract such an archive without letting it write
// outside the target directory, and Verify checks a bundle against its
// manifest's digest.
package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"potato-training/lib/atomicfile"
	"potato-training/lib/config"
)

// ManifestName is the manifest's file name inside a bundle.
const ManifestName = "manifest.json"

// MediaDir is the media directory inside a bundle, as manifest.json names it.
const MediaDir = "media"

// UnlabeledSplit is the split that holds items with no target, written only
// when the writer is asked to include them.
const UnlabeledSplit = "unlabeled"

// ErrChecksum is wrapped by the errors of Verify and UnpackFile when content
// does not match the digest or checksum it was published with.
var ErrChecksum = errors.New("checksum mismatch")

// Schema is one schema the bundle was built for (SchemaSpec in FORMATS.md).
type Schema struct {
	Name           string      `json:"name"`
	AnnotationType string      `json:"annotation_type"`
	Kind           config.Kind `json:"kind"`
	Labels         []string    `json:"labels"`
	SourceField    string      `json:"source_field"`
}

// SplitFile is one entry of the manifest's splits.
type SplitFile struct {
	Path   string `json:"path"`
	Format string `json:"format"`
	N      int    `json:"n"`
}

// Stats counts what went into the bundle.
//
// NItems is every item considered: the rows of the configured splits, the
// rows of unlabeled.jsonl, and NSkippedNoLabel (items with no target that
// were left out). NAnnotated is the rows of the configured splits.
type Stats struct {
	NItems          int            `json:"n_items"`
	NAnnotated      int            `json:"n_annotated"`
	NSkippedNoLabel int            `json:"n_skipped_no_label"`
	NMediaLinked    int            `json:"n_media_linked"`
	NMediaMissing   int            `json:"n_media_missing"`
	Splits          map[string]int `json:"splits"`
	Warnings        []string       `json:"warnings"`
}

// Manifest is manifest.json. Readers ignore fields they do not know.
type Manifest struct {
	V           int                  `json:"v"`
	Schemas     []Schema             `json:"schemas"`
	Splits      map[string]SplitFile `json:"splits"`
	Labels      map[string][]string  `json:"labels"`
	MediaDir    string               `json:"media_dir"`
	Modality    string               `json:"modality"`
	TextKey     string               `json:"text_key"`
	SplitSeed   int64                `json:"split_seed"`
	Aggregation string               `json:"aggregation"`
	Stats       Stats                `json:"stats"`
	Digest      string               `json:"digest"`
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	p := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(p)
	if err != nil {
		return m, fmt.Errorf("bundle: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("bundle: %s: %w", p, err)
	}
	if m.V != 1 {
		return Manifest{}, fmt.Errorf("bundle: %s: unsupported manifest version %d", p, m.V)
	}
	return m, nil
}

// ErrOutside is a split path that leaves the bundle's directory.
var ErrOutside = errors.New("leaves the bundle directory")

// OpenSplit opens a split file of the bundle in dir, path as its manifest
// names it. The manifest may come from the far side of a network: a path
// that leaves dir, by "..", as an absolute path or through a symlink, is
// refused with ErrOutside.
func OpenSplit(dir, path string) (*os.File, error) {
	if !filepath.IsLocal(path) {
		return nil, fmt.Errorf("bundle: split path %q: %w", path, ErrOutside)
	}
	f, err := os.OpenInRoot(dir, path)
	// os.Root's refusal of a symlink out of dir has no exported error.
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return nil, fmt.Errorf("bundle: split path %q: %w", path, ErrOutside)
	}
	return f, err
}

// Verify recomputes the digest of the bundle in dir and compares it, and
// each split's row count, with its manifest.
func Verify(dir string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(m.Splits))
	want := make(map[string]SplitFile, len(m.Splits))
	for name, s := range m.Splits {
		if !filepath.IsLocal(s.Path) {
			return fmt.Errorf("bundle %q: split %q: path %q leaves the bundle directory", dir, name, s.Path)
		}
		paths = append(paths, s.Path)
		want[s.Path] = s
	}
	sum, rows, err := digest(dir, paths)
	if err != nil {
		return err
	}
	for name, s := range m.Splits {
		if rows[s.Path] != s.N {
			return fmt.Errorf("bundle %q: split %q: %s has %d rows, the manifest says %d: %w",
				dir, name, s.Path, rows[s.Path], s.N, ErrChecksum)
		}
	}
	if sum != m.Digest {
		return fmt.Errorf("bundle %q: digest of the split files is %s, the manifest says %s: %w",
			dir, sum, m.Digest, ErrChecksum)
	}
	return nil
}

// digest is the bundle digest of FORMATS.md: sha256 over the files sorted by
// path, each contributing its base name and then its bytes. It also counts
// each file's lines.
func digest(dir string, paths []string) (string, map[string]int, error) {
	paths = append([]string(nil), paths...)
	sort.Strings(paths)
	h := sha256.New()
	rows := make(map[string]int, len(paths))
	for _, p := range paths {
		f, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			return "", nil, fmt.Errorf("bundle: %w", err)
		}
		io.WriteString(h, filepath.Base(p))
		lc := &lineCounter{w: h}
		_, err = io.Copy(lc, f)
		f.Close()
		if err != nil {
			return "", nil, fmt.Errorf("bundle: %w", err)
		}
		rows[p] = lc.n
	}
	return hex.EncodeToString(h.Sum(nil)), rows, nil
}

type lineCounter struct {
	w io.Writer
	n int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n += bytes.Count(p, []byte{'\n'})
	return c.w.Write(p)
}

// writeFileAtomic writes name in dir as .name.tmp, syncs it and renames it
// into place, so a reader sees the old file or the new one, never a part.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename or a new file in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
