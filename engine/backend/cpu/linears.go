package cpu

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// LinearsBackward: the composition of the other ops (backend.LinearsBackwardOps).
func (b *Backend) LinearsBackward(dx backend.Buf, acc bool, x, xa backend.Buf, ldxa int, ls []backend.LinearGrad, rows int) error {
	if err := checkLinears(ls); err != nil {
		return err
	}
	return backend.LinearsBackwardOps(b, dx, acc, x, xa, ldxa, ls, rows)
}

func checkLinears(ls []backend.LinearGrad) error {
	for i, l := range ls {
		if l.W == nil || l.W.Cols != ls[0].W.Cols {
			return fmt.Errorf("cpu: LinearsBackward: linear %d has another input width (or no weight)", i)
		}
	}
	return nil
}
