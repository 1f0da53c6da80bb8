package config

import (
	"fmt"
	"strings"
)

// MinAdminKeyLen is the length below which an admin_api_key is short
// enough to guess.
const MinAdminKeyLen = 16

// wellKnownKeys are placeholders that configs, tutorials and examples
// carry, lower-cased: the first keys an attacker tries.
var wellKnownKeys = map[string]bool{
	"change-me": true, "changeme": true, "change_me": true, "changethis": true, "change-this": true,
	"admin": true, "administrator": true, "password": true, "passw0rd": true, "secret": true,
	"potato": true, "test": true, "testing": true, "example": true, "default": true, "key": true,
	"api-key": true, "apikey": true, "letmein": true, "qwerty": true, "123456": true,
	"your-api-key": true, "your-secret-key": true, "replace-me": true, "xxx": true,
}

// WeakAdminKey says why key, an admin_api_key, is weak: a well-known
// placeholder, shorter than MinAdminKeyLen, or one character repeated.
// It is "" for a key that is none of these, and for no key.
func WeakAdminKey(key string) string {
	switch k := strings.ToLower(strings.TrimSpace(key)); {
	case key == "":
		return ""
	case wellKnownKeys[k]:
		return fmt.Sprintf("admin_api_key is %q, a well-known placeholder", key)
	case len(key) < MinAdminKeyLen:
		return fmt.Sprintf("admin_api_key has %d characters, fewer than %d", len(key), MinAdminKeyLen)
	case strings.Count(key, key[:1]) == len(key):
		return "admin_api_key is one character repeated"
	}
	return ""
}
