// Package builtin holds the built-in model (DESIGN §14): a small llama-family model made by
// `rlhfstation pretrain` from the synthetic corpus, committed under model/ (F16, about 4 MB)
// and embedded in the binary, so that every command has a model to run on with no path given
// and no network. model/pretrain.json records the settings and figures of its run. It was
// made by (the flags spelled out are the pretrain command's defaults):
//
//	go run . pretrain --out engine/builtin/model --corpus synthetic --corpus-bytes 20971520 \
//	    --val-bytes 262144 --tokenizer-bytes 4194304 --vocab 2048 --layers 4 --dim 192 \
//	    --heads 6 --kv-heads 2 --hidden 512 --context 256 --steps 3600 --batch 8 --lr 5e-3 \
//	    --warmup 100 --weight-decay 0.1 --clip 1 --seed 1 --eval-every 300 \
//	    --eval-tokens 32768 --dtype f16
//
// and then continued on the corpus with the calculator's tool-call transcripts, so that it
// sometimes calls calc(expression) in a math-tools episode (model/pretrain.json records both
// runs, the first as continued_from):
//
//	go run . pretrain --from engine/builtin/model --out engine/builtin/model \
//	    --corpus synthetic+tools --corpus-bytes 3145728 --val-bytes 131072 --steps 400 \
//	    --batch 8 --lr 1.5e-3 --warmup 20 --weight-decay 0.1 --clip 1 --seed 2 \
//	    --eval-every 0 --eval-tokens 16384 --dtype f16
//
// The runs are deterministic for their seeds on one machine; another CPU (other GEMM kernels)
// rounds differently and gives a model of the same quality but not the same bytes.
package builtin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"

	"rlhfstation/internal/atomicfile"
)

//go:embed model
var files embed.FS

const root = "model"

var (
	hashOnce sync.Once
	hash     string
	hashErr  error
)

// Hash is a content hash of the embedded folder (file names and bytes), 16 hex digits: the
// name of its extracted copy, so a binary with another model never uses a stale one.
func Hash() (string, error) {
	hashOnce.Do(func() {
		names, err := fileNames()
		if err != nil {
			hashErr = err
			return
		}
		h := sha256.New()
		for _, n := range names {
			b, err := files.ReadFile(path.Join(root, n))
			if err != nil {
				hashErr = err
				return
			}
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
			h.Write(b)
		}
		hash = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return hash, hashErr
}

// fileNames lists the embedded files, sorted.
func fileNames() ([]string, error) {
	entries, err := files.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errors.New("built-in model: no files embedded")
	}
	return names, nil
}

// Dir returns the folder of the built-in model, extracting it on first use to
// <user cache folder>/rlhfstation/builtin-<hash>/ (the system's temporary folder when there
// is no cache folder). Extraction writes a temporary folder beside it and renames it into
// place, so the folder is complete whenever it exists, and processes extracting at the same
// time agree on one copy.
func Dir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return extract(filepath.Join(base, "rlhfstation"))
}

// extract makes sure parent/builtin-<hash> holds the embedded files and returns its path.
func extract(parent string) (string, error) {
	h, err := Hash()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(parent, "builtin-"+h)
	if complete(dst) {
		return dst, nil
	}
	tmp, err := atomicfile.TempDir(dst)
	if err != nil {
		return "", fmt.Errorf("built-in model: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	names, err := fileNames()
	if err != nil {
		return "", err
	}
	for _, n := range names {
		b, err := files.ReadFile(path.Join(root, n))
		if err != nil {
			return "", err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, n), b, 0o644); err != nil {
			return "", fmt.Errorf("built-in model: %w", err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		// Another process may have put its copy there first: a non-empty folder refuses
		// the rename. Use it when it is whole; otherwise a broken copy (a file deleted by
		// hand, say) is replaced.
		if complete(dst) {
			return dst, nil
		}
		if err := atomicfile.ReplaceDir(tmp, dst); err != nil {
			return "", fmt.Errorf("built-in model: extract to %s: %w", dst, err)
		}
		return dst, nil
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return "", fmt.Errorf("built-in model: %w", err)
	}
	return dst, nil
}

// complete reports whether dir holds every embedded file at its size.
func complete(dir string) bool {
	names, err := fileNames()
	if err != nil {
		return false
	}
	for _, n := range names {
		info, err := os.Stat(filepath.Join(dir, n))
		if err != nil || !info.Mode().IsRegular() {
			return false
		}
		e, err := fs.Stat(files, path.Join(root, n))
		if err != nil || e.Size() != info.Size() {
			return false
		}
	}
	return true
}
