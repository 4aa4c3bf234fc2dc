package main

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestExports: the libraries export exactly the functions API.md lists.
func TestExports(t *testing.T) {
	a := stand(t)
	doc, err := os.ReadFile("API.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string][]string{}
	lib := ""
	item := regexp.MustCompile("^- `([A-Za-z0-9_]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "### ") {
			lib = strings.TrimPrefix(line, "### ")
			continue
		}
		if m := item.FindStringSubmatch(line); m != nil && lib != "" {
			listed[lib] = append(listed[lib], m[1])
		}
	}
	if len(listed) != 5 {
		t.Fatalf("API.md lists %d libraries", len(listed))
	}
	for name, want := range listed {
		f, err := elf.Open(filepath.Join(a.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.DynamicSymbols()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
				got = append(got, s.Name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s exports %v\nAPI.md lists %v", name, got, want)
		}
	}
}
