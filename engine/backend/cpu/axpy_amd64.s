//go:build !purego

#include "textflag.h"

// func f32axpy64(n int, p *float32, v *float32, ldv int, y *float32)
//
// y[0:64] += Σ_{j<n} p[j]·v[j·ldv : j·ldv+64], n ≥ 1, one fused multiply-add a value and key
// in key order: eight accumulators of eight values, each one multiply-add a key, so that the
// chain a key adds is one FMA's latency.
TEXT ·f32axpy64(SB), NOSPLIT, $0-40
	MOVQ n+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ v+16(FP), DI
	MOVQ ldv+24(FP), R8
	SHLQ $2, R8
	MOVQ y+32(FP), DX
	VMOVUPS 0(DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VMOVUPS 128(DX), Y4
	VMOVUPS 160(DX), Y5
	VMOVUPS 192(DX), Y6
	VMOVUPS 224(DX), Y7
key:
	VBROADCASTSS (SI), Y8
	VFMADD231PS 0(DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS 64(DI), Y8, Y2
	VFMADD231PS 96(DI), Y8, Y3
	VFMADD231PS 128(DI), Y8, Y4
	VFMADD231PS 160(DI), Y8, Y5
	VFMADD231PS 192(DI), Y8, Y6
	VFMADD231PS 224(DI), Y8, Y7
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ key
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET
