// Package hf holds the hf-text-classification trainer: one Python file,
// embedded in the binaries so that the far side of every backend gets the
// same script as the annotation server. The trainer is described in
// potato-agent(1); its protocol in potato-events(5).
package hf

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Name is the trainer's name in the registry.
const Name = "hf-text-classification"

//go:embed hf_text_classification.py
var script []byte

// Script returns the trainer's source.
func Script() []byte { return script }

// SHA256 is the hex SHA-256 of the script.
func SHA256() string {
	sum := sha256.Sum256(script)
	return hex.EncodeToString(sum[:])
}

// FileName is the script's name in a directory written by Write: named by
// its content, so that two versions of the toolkit sharing a directory
// never run each other's script.
func FileName() string { return Name + "-" + SHA256()[:16] + ".py" }

// Write writes the script into dir (made when missing) once, and returns
// its path. A file of that name whose content is the script is reused;
// otherwise the script is written to a temporary file, synced, given mode
// 0644 and renamed into place, so a reader never sees half a script.
func Write(dir string) (string, error) {
	path := filepath.Join(dir, FileName())
	if b, err := os.ReadFile(path); err == nil && sha256.Sum256(b) == sha256.Sum256(script) {
		return path, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+FileName()+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(script); err != nil {
		f.Close()
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	return path, nil
}

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
