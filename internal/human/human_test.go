package human

import "testing"

func TestCountAndBytes(t *testing.T) {
	for n, want := range map[int64]string{999: "999", 40_000: "40.0k", 1_967_808: "1.97M", 7_000_000_000: "7.00B"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %s, want %s", n, got, want)
		}
	}
	for n, want := range map[int64]string{512: "512 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.00 GiB", -3 << 20: "-3.0 MiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %s, want %s", n, got, want)
		}
	}
}
