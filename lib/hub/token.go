package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/rundir"
)

// TokenEnv is the variable the Hub's own tools read the token from.
const TokenEnv = "HF_TOKEN"

// Token is the Hub token a push sends, and where it came from (for
// messages: the value is never printed or logged).
type Token struct {
	Value  string
	Source string
}

// ErrNoToken is FindToken's answer when no token is set anywhere.
var ErrNoToken = errors.New("no token for the Hugging Face Hub: set HF_TOKEN, or give --token-file FILE (mode 0600), " +
	"or log in with the Hub's own tool, whose token file must be mode 0600 too")

// FindToken finds the token: the file tokenFile when given; else
// $HF_TOKEN (or the older $HUGGING_FACE_HUB_TOKEN); else the token file
// of the Hub's own tools, $HF_TOKEN_PATH, else $HF_HOME/token, else
// ~/.cache/huggingface/token, where it exists. A token file that group
// or others may read or write is refused, as ssh refuses such a key.
func FindToken(tokenFile string, getenv func(string) string) (Token, error) {
	if tokenFile != "" {
		v, err := readTokenFile(tokenFile)
		if err != nil {
			return Token{}, &UsageError{fmt.Errorf("--token-file: %w", err)}
		}
		return Token{v, tokenFile}, nil
	}
	for _, k := range []string{TokenEnv, "HUGGING_FACE_HUB_TOKEN"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return Token{v, "$" + k}, nil
		}
	}
	p := DefaultTokenFile(getenv)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return Token{}, &UsageError{ErrNoToken}
	}
	v, err := readTokenFile(p)
	if err != nil {
		return Token{}, &UsageError{err}
	}
	return Token{v, p}, nil
}

// DefaultTokenFile is where the Hub's own tools keep the token.
func DefaultTokenFile(getenv func(string) string) string {
	if p := getenv("HF_TOKEN_PATH"); p != "" {
		return p
	}
	home := getenv("HF_HOME")
	if home == "" {
		xdg := getenv("XDG_CACHE_HOME")
		if xdg == "" {
			h, _ := os.UserHomeDir()
			xdg = filepath.Join(h, ".cache")
		}
		home = filepath.Join(xdg, "huggingface")
	}
	return filepath.Join(home, "token")
}

// readTokenFile reads a token file, refusing one that other users could
// read or change (rundir.ReadSecret), or that holds more than one word.
func readTokenFile(path string) (string, error) {
	token, err := rundir.ReadSecret(path)
	if err != nil {
		if _, ok := err.(*os.PathError); ok {
			return "", err
		}
		return "", fmt.Errorf("the token file %w", err)
	}
	if strings.ContainsAny(token, "\n\r\x00 ") {
		return "", fmt.Errorf("the token file %q holds more than one word", path)
	}
	return token, nil
}
