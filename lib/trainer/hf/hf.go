// Package hf holds the hf-text-classification and hf-span trainers: a
// small Python package (python/potato_hf, one module per concern) and
// their launchers,
// embedded in the binaries so that the far side of every backend gets the
// same trainer as the annotation server. The trainer is described in
// potato-agent(1); its protocol in potato-events(5).
package hf

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"potato-training/lib/atomicfile"
	"potato-training/lib/rundir"
)

// Name is the trainer's name in the registry.
const Name = "hf-text-classification"

// Launcher is the script that runs the trainer, at the top of the tree
// Write writes: python3 LAUNCHER --spec SPEC.
const Launcher = "hf_text_classification.py"

// EmbedName is embed-logreg's name in the registry: a frozen sentence
// encoder's vectors and scikit-learn's logistic regression heads, the
// module potato_hf/embed.py of the same tree, run by EmbedLauncher.
const EmbedName = "embed-logreg"

// EmbedLauncher is the script that runs embed-logreg, beside Launcher.
const EmbedLauncher = "embed_logreg.py"

// SpanName is the token classifier of span schemas, the same package's
// span_loop, run by SpanLauncher beside Launcher.
const (
	SpanName     = "hf-span"
	SpanLauncher = "hf_span.py"
)

// Launchers are the scripts of the trainers of the tree, by name.
var Launchers = map[string]string{Name: Launcher, EmbedName: EmbedLauncher, SpanName: SpanLauncher, LLMName: LLMLauncher}

//go:embed python/hf_text_classification.py python/embed_logreg.py python/hf_span.py python/hf_llm_classification.py python/potato_hf/*.py python/potato_hf/*.json
var embedded embed.FS

// files are the trainer's files, by their path under the tree's top.
var files = func() map[string][]byte {
	out := map[string][]byte{}
	err := fs.WalkDir(embedded, "python", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := embedded.ReadFile(p)
		out[strings.TrimPrefix(p, "python/")] = b
		return err
	})
	if err != nil {
		panic(err)
	}
	return out
}()

// Files returns the trainer's files, by their slash-separated path under
// the tree's top (Launcher, potato_hf/...).
func Files() map[string][]byte {
	out := make(map[string][]byte, len(files))
	for k, v := range files {
		out[k] = v
	}
	return out
}

// names are the files' paths, sorted.
func names() []string {
	out := make([]string, 0, len(files))
	for k := range files {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SHA256 is the hex SHA-256 of the trainer: of each file's path, size and
// content, in the order of their paths.
func SHA256() string {
	h := sha256.New()
	for _, n := range names() {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DirName is the tree's name in a directory written by Write: named by
// its content, so that two versions of the toolkit sharing a directory
// never run each other's trainer.
func DirName() string { return Name + "-" + SHA256()[:16] }

// intact reports whether tree holds every file of the trainer as it is.
func intact(tree string) (bool, error) {
	for _, n := range names() {
		b, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(n)))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if !bytes.Equal(b, files[n]) {
			return false, nil
		}
	}
	return true, nil
}

// Write writes the trainer's tree into dir (made when missing) once, as
// DIR/DirName(), and returns its launcher's path. A tree of that name that
// holds every file as it is is reused; otherwise the tree is written to a
// temporary directory, each file synced with mode 0644, and renamed into
// place (a damaged tree is moved aside and removed), so that a reader
// never sees half a trainer. Writers take turns on a lock of dir, and the
// one whose turn comes after a whole tree is in place reuses it, so that
// processes writing at once all end with the same tree and none moves
// aside a tree another has just returned.
func Write(dir string) (string, error) {
	tree := filepath.Join(dir, DirName())
	launcher := filepath.Join(tree, Launcher)
	if ok, err := intact(tree); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	} else if ok {
		return launcher, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	release, err := rundir.LockDir(dir)
	if err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	defer release()
	if ok, err := intact(tree); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	} else if ok {
		return launcher, nil
	}
	tmp, err := os.MkdirTemp(dir, "."+DirName()+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, n := range names() {
		p := filepath.Join(tmp, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", fmt.Errorf("hf: %w", err)
		}
		if err := atomicfile.WriteFile(p, files[n], 0o644); err != nil {
			return "", fmt.Errorf("hf: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := atomicfile.ReplaceDir(tmp, tree); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	return launcher, nil
}

// EmbedPackages are the Python packages a run of embed-logreg imports.
func EmbedPackages() []string { return []string{"torch", "transformers", "sklearn"} }

// Packages are the Python packages a run with these parameters imports,
// as the script decides them: torch alone for a builtin: model, and
// transformers, with peft and jinja2 (which peft needs to save an
// adapter) unless lora is off, for a pretrained one.
func Packages(params map[string]string) []string {
	if strings.HasPrefix(params["model"], "builtin:") {
		return []string{"torch"}
	}
	switch strings.ToLower(params["lora"]) {
	case "0", "false", "no", "off":
		return []string{"torch", "transformers"}
	}
	return []string{"torch", "transformers", "peft", "jinja2"}
}
