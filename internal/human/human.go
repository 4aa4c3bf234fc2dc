// Package human formats counts and byte sizes for people: 1.97M parameters, 2.3 MiB.
package human

import (
	"fmt"
	"math"
)

// Count writes n with a k, M or B suffix.
func Count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Bytes writes b with a binary unit: 2.31 GiB, 812.0 MiB, 3.5 KiB, 512 B (negative sizes, a
// shrinking heap say, keep their sign).
func Bytes(b int64) string {
	x := float64(b)
	switch abs := math.Abs(x); {
	case abs >= 1<<30:
		return fmt.Sprintf("%.2f GiB", x/(1<<30))
	case abs >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case abs >= 1<<10:
		return fmt.Sprintf("%.1f KiB", x/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
