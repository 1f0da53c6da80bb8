//go:build tools

package deps

import (
	_ "github.com/alecthomas/kong"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/rogpeppe/go-internal/testscript"
	_ "golang.org/x/sync/errgroup"
	_ "gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)
