package format

import (
	"math"
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Duration(45 * time.Second), "45s"}, {Duration(125 * time.Second), "2m05s"},
		{Duration(3720 * time.Second), "1h02m"}, {Duration(-time.Second), "0s"}, {Duration(100 * time.Hour), "4d04h"},
		{Bytes(512), "512 B"}, {Bytes(3 << 30), "3.0 GiB"}, {Bytes(812 << 20), "812 MiB"},
		{Value(0.03312), "0.0331"}, {Value(39.6), "39.60"}, {Value(131), "131.0"}, {Value(1508.3), "1508"},
		{Value(2e-5), "2.00e-05"}, {Value(math.NaN()), "NaN"}, {Value(math.Inf(-1)), "-Inf"}, {Value(0), "0"},
		{Count(1234567), "1,234,567"}, {Count(-1234), "-1,234"}, {Count(12), "12"},
		{Percent(0.8734), "87.3%"}, {SignedPercent(-0.057), "-5.7%"}, {SignedPercent(0.019), "+1.9%"},
		{SignedPercent(99.99), "+9999.0%"}, {SignedPercent(1.23e5), "+1.2e+07%"}, {Percent(3e4), "3.0e+06%"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
