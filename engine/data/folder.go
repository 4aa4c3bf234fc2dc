package data

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// shardName is the Hugging Face Hub's shard naming, "train-00000-of-00003.parquet" (older
// uploads add "-<hash>" before the extension).
var shardName = regexp.MustCompile(`^(.+)-(\d{5})-of-(\d{5})(?:-[0-9a-f]+)?\.[a-z]+$`)

// splitWords are the split names recognised in file names like verl's train.parquet/test.parquet.
var splitWords = []string{"train", "test", "validation", "valid", "val", "dev", "eval"}

// metadataFiles are JSON files of dataset folders that hold no entries.
var metadataFiles = []string{"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}

// readFolder reads a folder of data files as one dataset: its .parquet, .jsonl or .json files
// (one format only), in order. When the names carry splits (Hub shards
// "test-00000-of-00001.parquet", or verl's train.parquet beside test.parquet), only "train"
// is read, and a folder with several splits and no train is refused. Hub shard sets must be
// complete.
func readFolder(dir string, o Options) (*Dataset, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files, subdirs, arrow []string
	exts := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		switch {
		case strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"):
		case e.IsDir():
			subdirs = append(subdirs, name+"/")
		case ext == ".arrow":
			arrow = append(arrow, name)
		case (ext == ".parquet" || ext == ".jsonl" || ext == ".json") && !slices.Contains(metadataFiles, name):
			files = append(files, name)
			exts[ext] = true
		}
	}
	if len(files) == 0 {
		switch {
		case len(arrow) > 0:
			return nil, fmt.Errorf("%s: holds Arrow files (datasets' save_to_disk), which are not read: write the split with Dataset.to_parquet", dir)
		case len(subdirs) > 0:
			return nil, fmt.Errorf("%s: no .parquet, .jsonl or .json file in it; name one of its folders: %s", dir, strings.Join(subdirs, ", "))
		}
		return nil, fmt.Errorf("%s: %w (no .parquet, .jsonl or .json file in the folder)", dir, ErrEmpty)
	}
	if len(exts) > 1 {
		var es []string
		for e := range exts {
			es = append(es, e)
		}
		slices.Sort(es)
		return nil, fmt.Errorf("%s: holds %s files: one dataset's shards have one format; keep one kind or name a file", dir, strings.Join(es, " and "))
	}

	bySplit := map[string][]string{}
	for _, f := range files {
		bySplit[splitOf(f)] = append(bySplit[splitOf(f)], f)
	}
	split := ""
	if len(bySplit) > 1 {
		if _, ok := bySplit["train"]; !ok {
			var names []string
			for s := range bySplit {
				if s == "" {
					s = "(no split)"
				}
				names = append(names, strconv.Quote(s))
			}
			slices.Sort(names)
			return nil, fmt.Errorf("%s: holds several splits (%s) and no \"train\": name the file(s) to train on", dir, strings.Join(names, ", "))
		}
		split = "train"
	} else {
		for s := range bySplit {
			split = s
		}
	}
	files = bySplit[split]
	slices.SortFunc(files, naturalCompare)
	if err := checkShards(dir, files); err != nil {
		return nil, err
	}

	var srcs []*source
	for _, f := range files {
		path := filepath.Join(dir, f)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		c, err := sniff(path, b)
		if err != nil {
			return nil, err
		}
		if c == Text {
			return nil, fmt.Errorf("%s: not JSON, JSONL or Parquet", path)
		}
		s, err := readRows(path, b, c)
		if err != nil {
			return nil, err
		}
		if len(srcs) > 0 && s.kind != srcs[0].kind {
			return nil, fmt.Errorf("%s: a %s file among %s shards (%s): one dataset's shards have one format", path, s.kind, srcs[0].kind, srcs[0].path)
		}
		srcs = append(srcs, s)
	}
	d, err := mapColumns(srcs, o)
	if err != nil {
		return nil, err
	}
	d.Folder = dir
	if len(bySplit) > 1 {
		d.Split = split
	}
	return d, nil
}

// splitOf is the split a file name says: the Hub shard prefix, or a split word at the start
// of the name ("train.parquet", "test_0.jsonl"); "" when it says none.
func splitOf(name string) string {
	if m := shardName.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	stem := strings.ToLower(strings.TrimSuffix(name, filepath.Ext(name)))
	for _, w := range splitWords {
		if rest, ok := strings.CutPrefix(stem, w); ok && (rest == "" || strings.ContainsRune("-_.", rune(rest[0]))) {
			return w
		}
	}
	return ""
}

// checkShards refuses an incomplete Hub shard set: every "-NNNNN-of-MMMMM" once, all M of them.
func checkShards(dir string, files []string) error {
	total, seen := -1, map[int]bool{}
	var odd []string
	for _, f := range files {
		m := shardName.FindStringSubmatch(f)
		if m == nil {
			odd = append(odd, f)
			continue
		}
		i, _ := strconv.Atoi(m[2])
		n, _ := strconv.Atoi(m[3])
		if total >= 0 && n != total {
			return fmt.Errorf("%s: shards of different sets (%s is one of %d, others of %d)", dir, f, n, total)
		}
		total = n
		if seen[i] || i >= n {
			return fmt.Errorf("%s: shard %s repeated or beyond its count", dir, f)
		}
		seen[i] = true
	}
	if total < 0 {
		return nil
	}
	if len(odd) > 0 {
		return fmt.Errorf("%s: %s is not named like the shards beside it (NAME-NNNNN-of-%05d)", dir, odd[0], total)
	}
	for i := 0; i < total; i++ {
		if !seen[i] {
			return fmt.Errorf("%s: shard %05d of %05d is missing (%d of %d present)", dir, i, total, len(seen), total)
		}
	}
	return nil
}

// naturalCompare orders names with their digit runs compared as numbers (part-2 before part-10).
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			x, y := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(x) - len(y); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
