package testref

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Parquet test files come from npm writers independent of parquet-go
// (engine/data/testdata/parquet/write.mjs), installed by .ci/run with npm ci into the folder
// ParquetWriters names.

// ParquetWriters is the folder holding the writers' node_modules: $RLHFSTATION_NPM_PARQUET,
// else <user cache>/rlhfstation/npm-parquet.
func ParquetWriters() string {
	if d := os.Getenv("RLHFSTATION_NPM_PARQUET"); d != "" {
		return d
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(c, "rlhfstation", "npm-parquet")
}

// WriteParquetFixtures runs write.mjs into dir. missing says why it could not run (node or the
// writers absent: a reference missing); err is write.mjs failing.
func WriteParquetFixtures(dir string) (missing string, err error) {
	node, lerr := exec.LookPath("node")
	if lerr != nil {
		return "node not found (apt-get install nodejs npm)", nil
	}
	mods := ParquetWriters()
	src := filepath.Join(RepoRoot(), "engine", "data", "testdata", "parquet")
	want, _ := os.ReadFile(filepath.Join(src, "package-lock.json"))
	have, _ := os.ReadFile(filepath.Join(mods, "package-lock.json"))
	if _, serr := os.Stat(filepath.Join(mods, "node_modules", "hyparquet-writer")); serr != nil || !bytes.Equal(want, have) {
		return "the npm Parquet writers are not installed in " + mods + " (run .ci/run, or: mkdir -p " + mods +
			" && cp engine/data/testdata/parquet/package*.json " + mods + " && npm ci --prefix " + mods + ")", nil
	}
	if out, err := exec.Command(node, filepath.Join(src, "write.mjs"), dir, mods).CombinedOutput(); err != nil {
		return "", &writeError{err, out}
	}
	return "", nil
}

type writeError struct {
	err error
	out []byte
}

func (e *writeError) Error() string {
	return "write.mjs failed: " + e.err.Error() + "\n" + string(e.out)
}

// ParquetFixtures writes the Parquet test files into a folder of the test's, skipping (failing
// in CI) without node or the writers.
func ParquetFixtures(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	missing, err := WriteParquetFixtures(dir)
	if err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		Missing(t, "%s", missing)
	}
	return dir
}
