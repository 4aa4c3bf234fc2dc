// Package wandb reads and writes Weights & Biases transaction logs (the run-<id>.wandb file of
// a run folder) and writes offline run folders that `wandb sync` uploads (DESIGN §9, §17).
//
// A .wandb file is a 7-byte header (":W&B", the little-endian magic 0xBEE1, version 0) then
// LevelDB-log framing: 32 KiB blocks holding chunks of {crc32 (IEEE, over the type byte and the
// data), uint16 length, type (1 full, 2 first, 3 middle, 4 last), data}; a chunk never crosses
// a block, a block's tail shorter than a chunk header is zeros. The header counts as the start
// of the first block. Each record is a protobuf wandb_internal.Record; the fields used here,
// from W&B's wandb_internal.proto:
//
//	Record        { int64 num = 1; HistoryRecord history = 2; SummaryRecord summary = 3;
//	                ConfigRecord config = 5; StatsRecord stats = 7; RunRecord run = 17;
//	                RunExitRecord exit = 18; }
//	RunRecord     { string run_id = 1; string entity = 2; string project = 3; ConfigRecord config = 4;
//	                string run_group = 6; string job_type = 7; string display_name = 8;
//	                repeated string tags = 10; string host = 13; int64 starting_step = 14;
//	                Timestamp start_time = 17; }        Timestamp { int64 seconds = 1; int32 nanos = 2; }
//	HistoryRecord { repeated HistoryItem item = 1; HistoryStep step = 2; }   HistoryStep { int64 num = 1; }
//	HistoryItem, ConfigItem, SummaryItem { string key = 1; repeated string nested_key = 2; string value_json = 16; }
//	ConfigRecord, SummaryRecord { repeated Item update = 1; repeated Item remove = 2; }
//	StatsRecord   { int32 stats_type = 1; Timestamp timestamp = 2; repeated StatsItem item = 3; }
//	StatsItem     { string key = 1; string value_json = 16; }
//	RunExitRecord { int32 exit_code = 1; int32 runtime = 2; }
//
// Values are JSON as Python's json module writes them (NaN and Infinity bare).
package wandb

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"rlhfstation/internal/pyjson"
)

// Kind is what a record holds.
type Kind int

const (
	KindOther Kind = iota // a record type not read here (files, telemetry, output…)
	KindRun
	KindConfig
	KindHistory
	KindSummary
	KindStats
	KindExit
)

func (k Kind) String() string {
	return [...]string{"other", "run", "config", "history", "summary", "stats", "exit"}[k]
}

// Item is one key of a history, config, summary or stats record. Nested keys (W&B's nested
// dictionaries) are joined with "/" into Key.
type Item struct {
	Key       string
	ValueJSON string
}

// Number reads the item's value as a number (NaN and ±Infinity included); ok is false for
// strings, lists, objects and null.
func (it Item) Number() (float64, bool) { return Number(it.ValueJSON) }

// Number reads a value_json as a number.
func Number(s string) (float64, bool) {
	switch strings.TrimSpace(s) {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	return pyjson.Number(json.RawMessage(strings.TrimSpace(s)))
}

// Record is one decoded record.
type Record struct {
	Num  int64
	Kind Kind

	// KindRun
	RunID, Entity, Project, DisplayName, Group, JobType, Host string
	Tags                                                      []string
	StartTime                                                 time.Time
	StartingStep                                              int64

	// KindHistory: Step is HistoryStep.num (W&B's _step), -1 when absent.
	Step int64
	// KindHistory, KindStats: the items; KindConfig, KindSummary (and a run record's config):
	// the updates.
	Items   []Item
	Removed []string // KindConfig, KindSummary

	Time time.Time // KindStats

	ExitCode, Runtime int32 // KindExit
}

// Protobuf field numbers (wandb_internal.proto).
const (
	recNum     = 1
	recHistory = 2
	recSummary = 3
	recConfig  = 5
	recStats   = 7
	recRun     = 17
	recExit    = 18
)

// Decode reads one wandb_internal.Record.
func Decode(b []byte) (Record, error) {
	r := Record{Step: -1}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		var err error
		switch {
		case num == recNum && typ == protowire.VarintType:
			r.Num = int64(v)
		case num == recHistory && typ == protowire.BytesType:
			r.Kind = KindHistory
			err = decodeHistory(raw, &r)
		case (num == recSummary || num == recConfig) && typ == protowire.BytesType:
			r.Kind = map[protowire.Number]Kind{recSummary: KindSummary, recConfig: KindConfig}[num]
			r.Items, r.Removed, err = decodeUpdates(raw)
		case num == recStats && typ == protowire.BytesType:
			r.Kind = KindStats
			err = decodeStats(raw, &r)
		case num == recRun && typ == protowire.BytesType:
			r.Kind = KindRun
			err = decodeRun(raw, &r)
		case num == recExit && typ == protowire.BytesType:
			r.Kind = KindExit
			err = walk(raw, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					r.ExitCode = int32(v)
				case num == 2 && typ == protowire.VarintType:
					r.Runtime = int32(v)
				}
				return nil
			})
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		return nil
	})
	return r, err
}

func decodeHistory(b []byte, r *Record) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			it, err := decodeItem(raw)
			if err != nil {
				return err
			}
			r.Items = append(r.Items, it)
		case num == 2 && typ == protowire.BytesType:
			r.Step = 0
			return walk(raw, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if num == 1 && typ == protowire.VarintType {
					r.Step = int64(v)
				}
				return nil
			})
		}
		return nil
	})
}

func decodeUpdates(b []byte) (items []Item, removed []string, err error) {
	err = walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			return nil
		}
		it, err := decodeItem(raw)
		if err != nil {
			return err
		}
		if num == 1 {
			items = append(items, it)
		} else {
			removed = append(removed, it.Key)
		}
		return nil
	})
	return items, removed, err
}

func decodeStats(b []byte, r *Record) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 2 && typ == protowire.BytesType:
			t, err := decodeTime(raw)
			r.Time = t
			return err
		case num == 3 && typ == protowire.BytesType:
			it, err := decodeItem(raw)
			r.Items = append(r.Items, it)
			return err
		}
		return nil
	})
}

func decodeRun(b []byte, r *Record) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		if typ == protowire.VarintType && num == 14 {
			r.StartingStep = int64(v)
			return nil
		}
		if typ != protowire.BytesType {
			return nil
		}
		s := string(raw)
		switch num {
		case 1:
			r.RunID = s
		case 2:
			r.Entity = s
		case 3:
			r.Project = s
		case 4:
			var err error
			r.Items, _, err = decodeUpdates(raw)
			return err
		case 6:
			r.Group = s
		case 7:
			r.JobType = s
		case 8:
			r.DisplayName = s
		case 10:
			r.Tags = append(r.Tags, s)
		case 13:
			r.Host = s
		case 17:
			t, err := decodeTime(raw)
			r.StartTime = t
			return err
		}
		return nil
	})
}

// decodeItem reads {key = 1, nested_key = 2, value_json = 16}; nested keys join with "/".
func decodeItem(b []byte) (Item, error) {
	var it Item
	var nested []string
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			it.Key = string(raw)
		case 2:
			nested = append(nested, string(raw))
		case 16:
			it.ValueJSON = string(raw)
		}
		return nil
	})
	if it.Key == "" && len(nested) > 0 {
		it.Key = strings.Join(nested, "/")
	}
	return it, err
}

func decodeTime(b []byte) (time.Time, error) {
	var sec, nanos int64
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		if typ == protowire.VarintType {
			switch num {
			case 1:
				sec = int64(v)
			case 2:
				nanos = int64(int32(v))
			}
		}
		return nil
	})
	return time.Unix(sec, nanos), err
}

// walk calls f with each field of the message b: varint and fixed values in v, the bytes of
// length-delimited fields in raw. Groups are refused (proto3 has none).
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("bad field tag")
		}
		b = b[n:]
		var v uint64
		var raw []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(b)
		default:
			return fmt.Errorf("field %d: wire type %d not read", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, raw); err != nil {
			return err
		}
	}
	return nil
}

// Encoding (the writer's records).

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func encodeItem(it Item) []byte {
	b := appendString(nil, 1, it.Key)
	b = protowire.AppendTag(b, 16, protowire.BytesType)
	return protowire.AppendString(b, it.ValueJSON)
}

func encodeTime(t time.Time) []byte {
	b := appendVarint(nil, 1, uint64(t.Unix()))
	if ns := t.Nanosecond(); ns != 0 {
		b = appendVarint(b, 2, uint64(ns))
	}
	return b
}

// Encode writes r as a wandb_internal.Record.
func Encode(r Record) []byte {
	var body []byte
	var field protowire.Number
	switch r.Kind {
	case KindRun:
		field = recRun
		body = appendString(body, 1, r.RunID)
		body = appendString(body, 2, r.Entity)
		body = appendString(body, 3, r.Project)
		if len(r.Items) > 0 {
			body = appendMessage(body, 4, encodeUpdates(r.Items, nil))
		}
		body = appendString(body, 6, r.Group)
		body = appendString(body, 7, r.JobType)
		body = appendString(body, 8, r.DisplayName)
		for _, t := range r.Tags {
			body = protowire.AppendTag(body, 10, protowire.BytesType)
			body = protowire.AppendString(body, t)
		}
		body = appendString(body, 13, r.Host)
		if r.StartingStep != 0 {
			body = appendVarint(body, 14, uint64(r.StartingStep))
		}
		if !r.StartTime.IsZero() {
			body = appendMessage(body, 17, encodeTime(r.StartTime))
		}
	case KindHistory:
		field = recHistory
		for _, it := range r.Items {
			body = appendMessage(body, 1, encodeItem(it))
		}
		if r.Step >= 0 {
			body = appendMessage(body, 2, appendVarint(nil, 1, uint64(r.Step)))
		}
	case KindConfig, KindSummary:
		field = recConfig
		if r.Kind == KindSummary {
			field = recSummary
		}
		body = encodeUpdates(r.Items, r.Removed)
	case KindStats:
		field = recStats
		body = appendMessage(body, 2, encodeTime(r.Time))
		for _, it := range r.Items {
			body = appendMessage(body, 3, encodeItem(it))
		}
	case KindExit:
		field = recExit
		if r.ExitCode != 0 {
			body = appendVarint(body, 1, uint64(int64(r.ExitCode)))
		}
		if r.Runtime != 0 {
			body = appendVarint(body, 2, uint64(int64(r.Runtime)))
		}
	}
	var b []byte
	if r.Num != 0 {
		b = appendVarint(b, recNum, uint64(r.Num))
	}
	if field != 0 {
		b = appendMessage(b, field, body)
	}
	return b
}

func encodeUpdates(items []Item, removed []string) []byte {
	var b []byte
	for _, it := range items {
		b = appendMessage(b, 1, encodeItem(it))
	}
	for _, k := range removed {
		b = appendMessage(b, 2, appendString(nil, 1, k))
	}
	return b
}

// JSONNumber writes v as Python's json module does (NaN, Infinity, -Infinity bare; integers
// without a fraction), the spelling W&B's value_json uses.
func JSONNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
