package backend

import (
	"strings"
	"testing"
)

func TestBufViewsHostMemory(t *testing.T) {
	x := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	b := HostF32(x)
	if b.Len() != 8 || b.DType() != F32 || b.Bytes() != 32 || !b.IsHost() || b.Nil() || b.Addr() != 0 {
		t.Fatalf("view of 8 floats: %v", b)
	}
	s := b.Slice(2, 4).Slice(1, 2) // elements 3, 4
	got := s.F32()
	if len(got) != 2 || cap(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("slice of a slice = %v (cap %d), want [3 4]", got, cap(got))
	}
	got[0] = 30 // the same memory: no copy
	if x[3] != 30 {
		t.Fatalf("writing through the view did not reach the slice")
	}
	if e := b.Slice(8, 0); e.Len() != 0 || len(e.F32()) != 0 {
		t.Fatalf("empty view at the end: %v", e)
	}
	if f := b.From(5).F32(); len(f) != 3 || f[0] != 5 {
		t.Fatalf("From(5) = %v", f)
	}
	if !HostF32(nil).Nil() || HostF32(nil).F32() != nil || !(Buf{}).Nil() {
		t.Fatalf("a nil slice must give an absent buffer")
	}
	for _, c := range []struct {
		b    Buf
		size int
	}{{HostU8([]byte{1}), 1}, {HostBF16([]uint16{1}), 2}, {HostF16([]uint16{1}), 2}, {HostI32([]int32{1}), 4},
		{HostI64([]int64{1}), 8}, {HostF64([]float64{1}), 8}} {
		if c.b.DType().Size() != c.size || c.b.Bytes() != c.size {
			t.Errorf("%v: %d bytes, want %d", c.b, c.b.Bytes(), c.size)
		}
	}
	if HostBF16([]uint16{7}).U16()[0] != 7 || HostF16([]uint16{9}).U16()[0] != 9 || HostI64([]int64{5}).I64()[0] != 5 {
		t.Fatalf("typed accessors")
	}
}

func TestBufMisuse(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), want) {
				t.Errorf("%s: panic %v, want one saying %q", name, r, want)
			}
		}()
		f()
	}
	b := HostF32(make([]float32, 4))
	mustPanic("slice past the end", "slice [3:+2]", func() { b.Slice(3, 2) })
	mustPanic("negative slice", "slice [-1:+1]", func() { b.Slice(-1, 1) })
	mustPanic("wrong type", "read as i32", func() { b.I32() })
	d := Device(BF16, 0x1000, 16)
	if d.IsHost() || d.Nil() || d.Addr() != 0x1000 || d.Slice(3, 2).Addr() != 0x1006 {
		t.Fatalf("device view %v: address %#x", d, d.Slice(3, 2).Addr())
	}
	mustPanic("host access to device memory", "device buffer", func() { d.U16() })
}

func TestDropoutKeepRate(t *testing.T) {
	for _, p := range []float32{0, 0.1, 0.5, 0.9} {
		kept := 0
		const n = 100000
		for i := 0; i < n; i++ {
			if DropoutKeep(42, i, p) {
				kept++
			}
		}
		if got := float64(kept) / n; got < float64(1-p)-0.01 || got > float64(1-p)+0.01 {
			t.Errorf("p=%g kept %.4f of the elements, want %.2f", p, got, 1-p)
		}
	}
	same := 0
	for i := 0; i < 1000; i++ {
		if DropoutKeep(1, i, 0.5) == DropoutKeep(2, i, 0.5) {
			same++
		}
	}
	if same > 600 || same < 400 {
		t.Errorf("seeds 1 and 2 agree on %d of 1000 elements: the masks do not depend on the seed", same)
	}
}

func TestSelectUnknown(t *testing.T) {
	if _, err := Select("tpu"); err == nil || !strings.Contains(err.Error(), `"tpu"`) {
		t.Fatalf("Select(tpu) = %v, want an error naming the device", err)
	}
}
