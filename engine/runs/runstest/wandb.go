package runstest

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// WriteWandb writes a W&B run folder as a TRL run with report_to="wandb" leaves it:
// dir/wandb/run-<time>-<id>/run-<id>.wandb (run, config, a history record per logged step with
// the Trainer's "train/" names and train/global_step, W&B's _step/_runtime/_timestamp, then
// summary and exit), files/config.yaml, and a latest-run link. Framing and protobuf are this
// package's own (W&B's datastore: LevelDB-log chunks in 32 KiB blocks, CRC-32 over type and
// data; wandb_internal.proto's field numbers). It returns the .wandb file's path.
func WriteWandb(dir string, p Plan) (string, error) {
	const id = "tr1x9q2z"
	run := filepath.Join(dir, "wandb", "run-20231114_221320-"+id)
	if err := os.MkdirAll(filepath.Join(run, "files"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(run, "files", "config.yaml"), []byte("_wandb:\n  value:\n    cli_version: 0.19.0\nlearning_rate:\n  value: 1.0e-05\n"), 0o644); err != nil {
		return "", err
	}
	os.Symlink(filepath.Base(run), filepath.Join(dir, "wandb", "latest-run"))
	item := func(key, val string) []byte { return lenField(lenField(nil, 1, []byte(key)), 16, []byte(val)) }
	var recs [][]byte
	num := 0
	add := func(field int, body []byte) {
		num++
		recs = append(recs, lenField(varint(tag(nil, 1, 0), uint64(num)), field, body))
	}
	runRec := lenField(nil, 1, []byte(id))
	runRec = lenField(runRec, 3, []byte("huggingface"))
	runRec = lenField(runRec, 8, []byte("Qwen2-0.5B-GRPO"))
	runRec = lenField(runRec, 17, varint(tag(nil, 1, 0), 1700000000))
	add(17, runRec)
	add(5, lenField(nil, 1, item("learning_rate", "1e-05")))
	for s := 1; s <= p.Steps; s++ {
		m := p.Metrics(s)
		var h []byte
		for _, k := range sortedKeys(m) {
			h = lenField(h, 1, item("train/"+k, pyJSON(m[k])))
		}
		h = lenField(h, 1, item("train/global_step", strconv.Itoa(s)))
		h = lenField(h, 1, item("_step", strconv.Itoa(s-1)))
		h = lenField(h, 1, item("_runtime", pyJSON(float64(s)*2.5)))
		h = lenField(h, 1, item("_timestamp", pyJSON(1700000000+float64(s)*2.5)))
		h = lenField(h, 1, item("train/completions", `{"_type": "table-file", "path": "media/table/x.table.json"}`))
		h = lenField(h, 2, varint(tag(nil, 1, 0), uint64(s-1)))
		add(2, h)
		if s%10 == 0 { // system metrics between the steps
			st := lenField(nil, 2, varint(tag(nil, 1, 0), 1700000000+uint64(s)))
			st = lenField(st, 3, item("cpu", "12.5"))
			add(7, st)
		}
	}
	add(3, lenField(nil, 1, item("train/reward", pyJSON(p.Metrics(p.Steps)["reward"]))))
	add(18, nil)

	out := []byte(":W&B\xe1\xbe\x00")
	for _, r := range recs {
		first := true
		for {
			left := 32768 - len(out)%32768
			if left < 7 {
				out = append(out, make([]byte, left)...)
				continue
			}
			n := min(left-7, len(r))
			last := n == len(r)
			typ := byte(1)
			switch {
			case first && !last:
				typ = 2
			case !first && last:
				typ = 4
			case !first:
				typ = 3
			}
			out = binary.LittleEndian.AppendUint32(out, crc32.Update(crc32.ChecksumIEEE([]byte{typ}), crc32.IEEETable, r[:n]))
			out = binary.LittleEndian.AppendUint16(out, uint16(n))
			out = append(out, typ)
			out = append(out, r[:n]...)
			r, first = r[n:], false
			if last {
				break
			}
		}
	}
	path := filepath.Join(run, "run-"+id+".wandb")
	return path, os.WriteFile(path, out, 0o644)
}

// pyJSON is a float as Python's json.dumps writes it (NaN bare).
func pyJSON(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if _, err := strconv.Atoi(s); err == nil {
		s += ".0"
	}
	return s
}
