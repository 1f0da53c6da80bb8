package testproject

import (
	"os"
	"testing"
)

func TestZZMakeSpam(t *testing.T) {
	dir := os.Getenv("MEASURE_DIR")
	if dir == "" {
		t.Skip()
	}
	emails := Emails(t, "../..")
	os.MkdirAll(dir, 0o755)
	WriteEmails(t, dir, emails, len(emails), "")
}
