//go:build purego || !amd64

package cpu

func axpyRows(p, v []float32, ldv int, y []float32) { axpyRowsGo(p, v, ldv, y) }
