// Package testref gives tests their outside references (PyTorch, ../shared/data) under the
// rule of DESIGN §11: a missing reference skips the test with a message, or fails it when
// RLHFSTATION_REQUIRE_REFERENCES=1 (which CI sets).
package testref

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Required reports whether missing references fail tests instead of skipping them.
func Required() bool { return os.Getenv("RLHFSTATION_REQUIRE_REFERENCES") == "1" }

// Missing skips t, or fails it in CI, saying what reference is missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("reference missing (RLHFSTATION_REQUIRE_REFERENCES=1): "+format, args...)
	}
	t.Skipf("reference missing: "+format, args...)
}

// RepoRoot is the repository's root folder (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// SharedData returns the path of a file or folder under ../shared/data, skipping (or failing
// in CI) when it is absent.
func SharedData(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "..", "shared", "data", rel)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "%s not found (../shared/data beside the checkout)", p)
	}
	return p
}

// Python returns a python3 that can import torch (RLHFSTATION_PYTHON, else /usr/bin/python3,
// else python3 on PATH), skipping (or failing in CI) when there is none.
func Python(t testing.TB) string {
	t.Helper()
	cands := []string{os.Getenv("RLHFSTATION_PYTHON"), "/usr/bin/python3", "python3"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if err := exec.Command(c, "-c", "import torch, numpy").Run(); err == nil {
			return c
		}
	}
	Missing(t, "no python3 with torch and numpy (apt-get install python3-torch python3-numpy)")
	return ""
}

// Python3 returns a python3 for scripts that need only the standard library
// (RLHFSTATION_PYTHON, else /usr/bin/python3, else python3 on PATH), skipping (or failing in
// CI) when there is none.
func Python3(t testing.TB) string {
	t.Helper()
	for _, c := range []string{os.Getenv("RLHFSTATION_PYTHON"), "/usr/bin/python3", "python3"} {
		if c == "" {
			continue
		}
		if err := exec.Command(c, "-c", "import json, sys").Run(); err == nil {
			return c
		}
	}
	Missing(t, "no python3 (apt-get install python3)")
	return ""
}
