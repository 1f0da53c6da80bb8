// Package teststore makes and opens Potato's SQLite store for tests. It
// is a package of its own, apart from internal/testproject, because it
// links the SQLite driver: a test binary that never opens a store does
// not link it (about a second of the linker's time at every go test).
package teststore

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"potato-training/internal/testcli"
)

// PotatoStore makes the SQLite store at path as Potato's own migration
// leaves it, from lib/writeback/testdata/potato_store.sql: written from
// the constraints of Potato's store, not from the toolkit's code, so that
// tests meet a store someone else created.
func PotatoStore(t testing.TB, path string) string {
	t.Helper()
	ddl, err := os.ReadFile(filepath.Join(testcli.Root(), "lib", "writeback", "testdata", "potato_store.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatalf("potato_store.sql: %v", err)
	}
	return path
}

// OpenDB opens the store at path for a test's own queries, closed when
// the test ends.
func OpenDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
