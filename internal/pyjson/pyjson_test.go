package pyjson

import (
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
)

func TestReaderRewritesOnlyBareWords(t *testing.T) {
	in := `{"a": NaN, "b": [Infinity, -Infinity, -1.5e3], "s": "NaN Infinity \" NaN", "c": null, "d": true}`
	out, err := io.ReadAll(NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a": "NaN", "b": ["+Inf", "-Inf", -1.5e3], "s": "NaN Infinity \" NaN", "c": null, "d": true}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if v, ok := Number(doc["a"]); !ok || !math.IsNaN(v) {
		t.Errorf("a = %v %v", v, ok)
	}
	var b []json.RawMessage
	json.Unmarshal(doc["b"], &b)
	for i, want := range []float64{math.Inf(1), math.Inf(-1), -1500} {
		if v, ok := Number(b[i]); !ok || v != want {
			t.Errorf("b[%d] = %v %v, want %v", i, v, ok, want)
		}
	}
	for _, k := range []string{"s", "c", "d"} {
		if _, ok := Number(doc[k]); ok {
			t.Errorf("%s read as a number", k)
		}
	}
}

func TestReaderLeavesBadWordsForTheDecoder(t *testing.T) {
	out, _ := io.ReadAll(NewReader(strings.NewReader(`[Nope, -Inf]`)))
	if string(out) != `[Nope, -Inf]` {
		t.Fatalf("%s", out)
	}
	if json.Unmarshal(out, new(any)) == nil {
		t.Fatal("invalid JSON accepted")
	}
}
