package presets

import (
	"strings"
	"testing"
)

// FuzzDecode: any preset text decodes into a preset or is refused with an error naming its
// source; nothing panics.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"story", "technical", "code", "math"} {
		if b, err := builtin.ReadFile("builtin/" + name + ".toml"); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("[ppl]\nweights = [1, 0, 0]\nshape = \"linear\"\n"))
	f.Add([]byte("[ntl]\nweight = \"x\"\n"))
	f.Add([]byte("[[rewards]]\nkind = \"command\"\nname = \"short\"\ncommand = [\"python3\", \"r.py\"]\nweight = 0.5\ntimeout = 1.5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Decode("fuzz", "fuzz.toml", data)
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz.toml") {
			t.Fatalf("error does not name the source: %v", err)
		}
	})
}
