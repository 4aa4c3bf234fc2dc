//go:build purego || !amd64

package cpu

func axpyRows(p, v []float32, ldv int, y []float32) { axpyRowsGo(p, v, ldv, y) }

func dotRows(x, w []float32, ldw int, y []float32) { dotRowsGo(x, w, ldw, y) }
