package config

import (
	"strings"
	"testing"
)

func TestWeakAdminKey(t *testing.T) {
	for key, want := range map[string]string{
		"change-me":                        `admin_api_key is "change-me", a well-known placeholder`,
		"Password":                         `admin_api_key is "Password", a well-known placeholder`,
		"s3cr3t-k3y":                       "admin_api_key has 10 characters, fewer than 16",
		strings.Repeat("a", 32):            "admin_api_key is one character repeated",
		"":                                 "",
		"9f2c4e1ab7d05e3c8b6a2f90d1e4c7b3": "",
	} {
		if got := WeakAdminKey(key); got != want {
			t.Errorf("WeakAdminKey(%q) = %q, want %q", key, got, want)
		}
	}
}
