package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Names of a Hugging Face model folder's weight files.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Set is a model's weights: one file, or the shards an index names. Its methods mirror File's.
type Set struct {
	Dir   string
	Index string           // path of the index file, "" for a single file
	Files []*File          // in the order first named
	Meta  map[string]any   // the index's "metadata" (total_size…), nil for a single file
	where map[string]*File // tensor → file holding it
	names []string
}

type indexJSON struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenSet opens dir/model.safetensors.index.json and its shards when the index exists, else
// dir/model.safetensors. dir may also name a .safetensors file directly.
func OpenSet(dir string) (*Set, error) {
	if strings.HasSuffix(dir, ".safetensors") {
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			return openSingle(filepath.Dir(dir), dir)
		}
	}
	index := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(index)
	switch {
	case err == nil:
		return openSharded(dir, index, raw)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err != nil {
		return nil, fmt.Errorf("safetensors: %s: no %s or %s", dir, SingleFile, IndexFile)
	}
	return openSingle(dir, single)
}

func openSingle(dir, path string) (*Set, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	s := &Set{Dir: dir, Files: []*File{f}, where: map[string]*File{}, names: f.Names()}
	for _, n := range s.names {
		s.where[n] = f
	}
	return s, nil
}

func openSharded(dir, index string, raw []byte) (*Set, error) {
	var idx indexJSON
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %v", index, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: weight_map is missing or empty", index)
	}
	s := &Set{Dir: dir, Index: index, Meta: idx.Metadata, where: map[string]*File{}}
	opened := map[string]*File{}
	for _, name := range sortedKeys(idx.WeightMap) {
		shard := idx.WeightMap[name]
		if shard == "" || filepath.IsAbs(shard) || !filepath.IsLocal(shard) {
			s.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q: shard %q is not a file name inside %s", index, name, shard, dir)
		}
		f, ok := opened[shard]
		if !ok {
			var err error
			if f, err = Open(filepath.Join(dir, shard)); err != nil {
				s.Close()
				return nil, fmt.Errorf("%w (shard of %s)", err, index)
			}
			opened[shard] = f
			s.Files = append(s.Files, f)
		}
		if _, ok := f.infos[name]; !ok {
			s.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q is mapped to %s, which does not hold it", index, name, f.Path)
		}
		s.where[name] = f
		s.names = append(s.names, name)
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Close closes every file of the set.
func (s *Set) Close() error {
	var err error
	for _, f := range s.Files {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Names lists the tensors of the set, sorted.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// File is the file holding a tensor.
func (s *Set) File(name string) (*File, bool) {
	f, ok := s.where[name]
	return f, ok
}

// Info describes one tensor.
func (s *Set) Info(name string) (TensorInfo, bool) {
	f, ok := s.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

func (s *Set) missing(name string) error {
	what := s.Index
	if what == "" && len(s.Files) > 0 {
		what = s.Files[0].Path
	}
	return fmt.Errorf("safetensors: %s: no tensor %q", what, name)
}

// Bytes returns a tensor's raw bytes (see File.Bytes).
func (s *Set) Bytes(name string) ([]byte, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, s.missing(name)
	}
	return f.Bytes(name)
}

// Float32 returns a tensor converted to float32 and its shape (see File.Float32).
func (s *Set) Float32(name string) ([]float32, []int, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, nil, s.missing(name)
	}
	return f.Float32(name)
}

// Float32Into converts a tensor into dst (see File.Float32Into).
func (s *Set) Float32Into(name string, dst []float32) error {
	f, ok := s.where[name]
	if !ok {
		return s.missing(name)
	}
	return f.Float32Into(name, dst)
}

// Float32RangeInto converts part of a tensor into dst (see File.Float32RangeInto).
func (s *Set) Float32RangeInto(name string, lo int, dst []float32) error {
	f, ok := s.where[name]
	if !ok {
		return s.missing(name)
	}
	return f.Float32RangeInto(name, lo, dst)
}

// Release says that a tensor's data will not be read again soon: where the file is mapped,
// its whole pages leave the process's resident memory (the page cache keeps them), so reading
// a large model tensor by tensor holds one tensor's pages at a time, not the file's. Reading it
// again later still works.
func (s *Set) Release(name string) {
	if info, ok := s.Info(name); ok {
		s.ReleaseRange(name, 0, info.NumElements())
	}
}

// ReleaseRange is Release for the elements [lo, hi) of a tensor: a tensor read a chunk at a
// time holds one chunk's pages.
func (s *Set) ReleaseRange(name string, lo, hi int) {
	f, ok := s.where[name]
	if !ok || f.mapping == nil {
		return
	}
	t := f.infos[name]
	size := int64(t.DType.Size())
	begin, end := f.dataStart+t.Begin+int64(lo)*size, f.dataStart+t.Begin+int64(hi)*size
	dropPages(f.mapping, int(begin), int(min(end, f.dataStart+t.End)))
}
