//go:build !purego

package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// An interpreter of the generated kernels' assembly (q4dot_amd64.s), instruction by
// instruction as Intel's manual defines each one, with Go's operand order (sources first,
// the destination last). It exists because this project's CPU has no AVX-512: the AVX-512
// kernel's text runs here under the interpreter, and the interpreter itself is held to the
// AVX2 kernels, which it must reproduce bit for bit against the CPU running them.

// simRegion is a piece of memory the kernel may address: a Go slice's bytes at a made-up base.
type simRegion struct {
	base uint64
	b    []byte
}

type asmSim struct {
	text   []string       // the function's instructions and labels
	labels map[string]int // label → index in text
	data   map[string]*simRegion
	mem    []*simRegion
	gpr    map[string]uint64
	vec    [32][64]byte
	zf     bool
	lt     bool // SF ≠ OF: after CMPQ a, b (Go's order), a < b signed
	args   []uint64
	steps  int
}

// loadAsmFunc reads TEXT ·name from the assembly file, with the file's DATA symbols.
func loadAsmFunc(path, name string) (*asmSim, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &asmSim{labels: map[string]int{}, data: map[string]*simRegion{}, gpr: map[string]uint64{}}
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "DATA ") { // DATA sym<>+off(SB)/size, $value
			f := strings.Fields(strings.ReplaceAll(line[5:], ",", " "))
			sym, rest, _ := strings.Cut(f[0], "+")
			offS, sizeS, _ := strings.Cut(rest, "(SB)/")
			off, _ := strconv.Atoi(offS)
			size, _ := strconv.Atoi(sizeS)
			v, err := strconv.ParseUint(strings.TrimPrefix(f[1], "$"), 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", path, line, err)
			}
			r := s.data[sym]
			if r == nil {
				// far above the arguments' regions (ptr), whatever their count
				r = &simRegion{base: uint64(0x7f00_0000_0000 + 0x10_0000*len(s.data))}
				s.data[sym] = r
			}
			for len(r.b) < off+size {
				r.b = append(r.b, 0)
			}
			for k := 0; k < size; k++ {
				r.b[off+k] = byte(v >> (8 * k))
			}
			continue
		}
		if strings.HasPrefix(line, "TEXT ") {
			in = strings.HasPrefix(line, "TEXT ·"+name+"(SB)")
			continue
		}
		if !in {
			continue
		}
		if strings.HasSuffix(line, ":") {
			s.labels[strings.TrimSuffix(line, ":")] = len(s.text)
			continue
		}
		s.text = append(s.text, line)
	}
	if len(s.text) == 0 {
		return nil, fmt.Errorf("%s: no TEXT ·%s", path, name)
	}
	for _, r := range s.data {
		s.mem = append(s.mem, r)
	}
	return s, nil
}

// ptr maps a slice into the interpreter's memory and gives its address.
func (s *asmSim) ptr(b []byte) uint64 {
	r := &simRegion{base: uint64(0x1000_0000 * (len(s.mem) + 1)), b: b}
	s.mem = append(s.mem, r)
	return r.base
}

// at is n bytes of memory at addr; it fails the run outside every region.
func (s *asmSim) at(addr uint64, n int) []byte {
	for _, r := range s.mem {
		if addr >= r.base && addr+uint64(n) <= r.base+uint64(len(r.b)) {
			o := addr - r.base
			return r.b[o : o+uint64(n)]
		}
	}
	panic(fmt.Sprintf("asmsim: %d bytes at %#x are outside the kernel's arguments", n, addr))
}

// vreg names a vector register: its index and width in bytes (X 16, Y 32, Z 64).
func vreg(op string) (int, int, bool) {
	if len(op) < 2 {
		return 0, 0, false
	}
	w := map[byte]int{'X': 16, 'Y': 32, 'Z': 64}[op[0]]
	if w == 0 {
		return 0, 0, false
	}
	i, err := strconv.Atoi(op[1:])
	if err != nil || i < 0 || i > 31 {
		return 0, 0, false
	}
	return i, w, true
}

var gprNames = map[string]bool{"AX": true, "BX": true, "CX": true, "DX": true, "SI": true, "DI": true, "BP": true,
	"R8": true, "R9": true, "R10": true, "R11": true, "R12": true, "R13": true, "R14": true, "R15": true}

// addr evaluates a memory operand: off(BASE), off(BASE)(INDEX*scale), sym<>+off(SB).
func (s *asmSim) addr(op string) uint64 {
	if strings.HasSuffix(op, "(SB)") {
		sym, offS, _ := strings.Cut(strings.TrimSuffix(op, "(SB)"), "+")
		off, _ := strconv.Atoi(offS)
		r := s.data[sym]
		if r == nil {
			panic("asmsim: unknown symbol " + sym)
		}
		return r.base + uint64(off)
	}
	i := strings.Index(op, "(")
	off := int64(0)
	if i > 0 {
		v, err := strconv.ParseInt(op[:i], 0, 64)
		if err != nil {
			panic("asmsim: bad offset in " + op)
		}
		off = v
	}
	parts := strings.Split(strings.TrimSuffix(op[i+1:], ")"), ")(")
	a := s.gpr[parts[0]] + uint64(off)
	if len(parts) == 2 {
		reg, scS, _ := strings.Cut(parts[1], "*")
		sc, _ := strconv.Atoi(scS)
		a += s.gpr[reg] * uint64(sc)
	}
	return a
}

// read is an operand's first n bytes: a vector register, memory, or (n ≤ 8) a GPR or $imm.
func (s *asmSim) read(op string, n int) []byte {
	if i, _, ok := vreg(op); ok {
		out := make([]byte, n)
		copy(out, s.vec[i][:n])
		return out
	}
	if strings.Contains(op, "(") {
		out := make([]byte, n)
		copy(out, s.at(s.addr(op), n))
		return out
	}
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, s.scalar(op))
	return out[:n]
}

// scalar is a GPR, an immediate or an argument slot (name+off(FP)).
func (s *asmSim) scalar(op string) uint64 {
	switch {
	case strings.HasPrefix(op, "$"):
		v, err := strconv.ParseInt(op[1:], 0, 64)
		if err != nil {
			panic("asmsim: bad immediate " + op)
		}
		return uint64(v)
	case strings.HasSuffix(op, "(FP)"):
		_, offS, _ := strings.Cut(strings.TrimSuffix(op, "(FP)"), "+")
		off, _ := strconv.Atoi(offS)
		return s.args[off/8]
	case gprNames[op]:
		return s.gpr[op]
	}
	panic("asmsim: not a scalar operand " + op)
}

// write sets a vector register (zeroing the bytes above the written width, as VEX and EVEX
// encodings do) or stores to memory.
func (s *asmSim) write(op string, b []byte) {
	if i, _, ok := vreg(op); ok {
		s.vec[i] = [64]byte{}
		copy(s.vec[i][:], b)
		return
	}
	copy(s.at(s.addr(op), len(b)), b)
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
func f64At(b []byte, i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
func putF32(b []byte, i int, v float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
}

// fma32 is a·b + c rounded once to float32, as VFMADD231PS does: a·b is exact in float64;
// the sum's float64 rounding can only mislead the float32 rounding at a tie, settled here by
// the sign of that rounding's error.
func fma32(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c)
	s := p + q
	bv := s - p
	e := (p - (s - bv)) + (q - bv)
	r := float32(s)
	if e == 0 || math.IsInf(s, 0) || math.IsNaN(s) || float64(r) == s {
		return r
	}
	other := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if s != (float64(r)+float64(other))/2 { // not a tie: the float64 sum rounds as the exact one
		return r
	}
	if (e > 0) == (float64(other) > float64(r)) {
		return other
	}
	return r
}

// Run executes the function with the given argument slots (8 bytes each) until RET.
func (s *asmSim) Run(args ...uint64) {
	s.args = args
	for pc := 0; pc < len(s.text); {
		s.steps++
		if s.steps > 200_000_000 {
			panic("asmsim: no RET after 2e8 instructions")
		}
		line := s.text[pc]
		pc++
		mn, rest, _ := strings.Cut(line, " ")
		var ops []string
		for _, o := range strings.Split(rest, ",") {
			if o = strings.TrimSpace(o); o != "" {
				ops = append(ops, o)
			}
		}
		dst := ""
		if len(ops) > 0 {
			dst = ops[len(ops)-1]
		}
		width := 0
		if _, w, ok := vreg(dst); ok {
			width = w
		}
		lanes := width / 4
		switch mn {
		case "RET":
			return
		case "PREFETCHT0": // a hint: no effect on registers, flags or memory (it may point past the data)
		case "VZEROUPPER":
			for i := range s.vec {
				clear(s.vec[i][16:])
			}
		case "MOVQ":
			if strings.Contains(ops[0], "(") && !strings.HasSuffix(ops[0], "(FP)") { // a load
				s.gpr[dst] = binary.LittleEndian.Uint64(s.read(ops[0], 8))
				break
			}
			s.gpr[dst] = s.scalar(ops[0])
		case "VMOVD": // the low dword of an xmm into a GPR, zero-extended
			s.gpr[dst] = uint64(binary.LittleEndian.Uint32(s.read(ops[0], 4)))
		case "LEAQ":
			s.gpr[dst] = s.addr(ops[0])
		case "ADDQ":
			s.gpr[dst] += s.scalar(ops[0])
			s.zf = s.gpr[dst] == 0
		case "SHLQ":
			s.gpr[dst] <<= s.scalar(ops[0])
			s.zf = s.gpr[dst] == 0
		case "SUBQ": // flags as CMPQ dst, src
			a, b := int64(s.gpr[dst]), int64(s.scalar(ops[0]))
			s.gpr[dst] = uint64(a - b)
			s.zf, s.lt = a == b, a < b
		case "CMPQ": // Go's order: CMPQ a, b compares a with b
			a, b := int64(s.scalar(ops[0])), int64(s.scalar(dst))
			s.zf, s.lt = a == b, a < b
		case "TESTQ": // ZF from a AND b; OF = 0, so SF ≠ OF is its sign
			v := int64(s.scalar(ops[0]) & s.scalar(dst))
			s.zf, s.lt = v == 0, v < 0
		case "JZ", "JEQ":
			if s.zf {
				pc = s.jump(dst)
			}
		case "JLT": // JL: SF ≠ OF
			if s.lt {
				pc = s.jump(dst)
			}
		case "JGE": // JGE: SF = OF
			if !s.lt {
				pc = s.jump(dst)
			}
		case "DECQ":
			s.gpr[dst]--
			s.zf = s.gpr[dst] == 0
		case "JNZ", "JNE":
			if !s.zf {
				pc = s.jump(dst)
			}
		case "JMP":
			pc = s.jump(dst)
		case "VMOVDQU", "VMOVUPS":
			n := width
			if n == 0 {
				_, n, _ = vreg(ops[0])
			}
			s.write(dst, s.read(ops[0], n))
		case "VMOVSS": // a store writes 4 bytes; a load zeroes the rest of the register
			s.write(dst, s.read(ops[0], 4))
		case "VMOVSD":
			s.write(dst, s.read(ops[0], 8))
		case "VBROADCASTSD":
			v, out := s.read(ops[0], 8), make([]byte, width)
			for i := 0; i < width; i += 8 {
				copy(out[i:], v)
			}
			s.write(dst, out)
		case "VPMAXUD": // per dword, unsigned
			a, b, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width; i += 4 {
				binary.LittleEndian.PutUint32(out[i:], max(binary.LittleEndian.Uint32(a[i:]), binary.LittleEndian.Uint32(b[i:])))
			}
			s.write(dst, out)
		case "VPSHUFD": // $imm, src, dst: per 128-bit lane, dword i is the lane's dword (imm >> 2i) & 3
			k, src, out := s.scalar(ops[0]), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width/4; i++ {
				j := int(k>>(2*(i%4))) & 3
				copy(out[4*i:4*i+4], src[16*(i/4)+4*j:])
			}
			s.write(dst, out)
		case "VSHUFPS": // $imm, src2, src1, dst: per 128-bit lane, two dwords of src1 then two of src2
			k, src2, src1, out := s.scalar(ops[0]), s.read(ops[1], width), s.read(ops[2], width), make([]byte, width)
			for lane := 0; lane < width; lane += 16 {
				for i := 0; i < 4; i++ {
					from := src1
					if i >= 2 {
						from = src2
					}
					j := int(k>>(2*i)) & 3
					copy(out[lane+4*i:lane+4*i+4], from[lane+4*j:])
				}
			}
			s.write(dst, out)
		case "VPACKSSDW": // src2, src1, dst: per 128-bit lane, src1's 4 dwords then src2's as int16, saturated
			src2, src1, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for lane := 0; lane < width; lane += 16 {
				for i := 0; i < 8; i++ {
					from := src1
					if i >= 4 {
						from = src2
					}
					v := min(max(int32(binary.LittleEndian.Uint32(from[lane+4*(i%4):])), math.MinInt16), math.MaxInt16)
					binary.LittleEndian.PutUint16(out[lane+2*i:], uint16(int16(v)))
				}
			}
			s.write(dst, out)
		case "VINSERTI128": // $imm, xmm, src1, dst: src1 with its 128-bit lane imm&1 replaced
			k, x, out := s.scalar(ops[0]), s.read(ops[1], 16), s.read(ops[2], 32)
			copy(out[16*(k&1):], x)
			s.write(dst, out)
		case "VCVTSS2SD", "VCVTSD2SS", "VMULSD", "VDIVSD": // src2, src1, dst: the low element; the rest of src1's 128 bits kept
			src1 := s.read(ops[1], 16)
			switch mn {
			case "VCVTSS2SD":
				binary.LittleEndian.PutUint64(src1, math.Float64bits(float64(f32At(s.read(ops[0], 4), 0))))
			case "VCVTSD2SS":
				putF32(src1, 0, float32(f64At(s.read(ops[0], 8), 0)))
			case "VMULSD":
				binary.LittleEndian.PutUint64(src1, math.Float64bits(f64At(src1, 0)*f64At(s.read(ops[0], 8), 0)))
			case "VDIVSD":
				binary.LittleEndian.PutUint64(src1, math.Float64bits(f64At(src1, 0)/f64At(s.read(ops[0], 8), 0)))
			}
			s.write(dst, src1)
		case "VCVTPS2PD": // the source's low floats, each widened to a double (exact)
			src, out := s.read(ops[0], width/2), make([]byte, width)
			for i := 0; i < width/8; i++ {
				binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float64(f32At(src, i))))
			}
			s.write(dst, out)
		case "VCVTTPD2DQY": // 4 doubles of a ymm to int32, truncated; NaN and out of range: 0x80000000
			src, out := s.read(ops[0], 32), make([]byte, 16)
			for i := 0; i < 4; i++ {
				v, r := math.Trunc(f64At(src, i)), uint32(0x80000000)
				if v >= math.MinInt32 && v <= math.MaxInt32 {
					r = uint32(int32(v))
				}
				binary.LittleEndian.PutUint32(out[4*i:], r)
			}
			s.write(dst, out)
		case "VMULPD", "VADDPD":
			a, b, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width/8; i++ {
				x, y, r := f64At(b, i), f64At(a, i), 0.0
				if mn == "VMULPD" {
					r = x * y
				} else {
					r = x + y
				}
				binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(r))
			}
			s.write(dst, out)
		case "VBLENDVPD": // mask, src2, src1, dst: the sign of mask picks src2 over src1, per double
			mask, b, a, out := s.read(ops[0], width), s.read(ops[1], width), s.read(ops[2], width), make([]byte, width)
			for i := 0; i < width; i += 8 {
				if mask[i+7]&0x80 != 0 {
					copy(out[i:i+8], b[i:])
				} else {
					copy(out[i:i+8], a[i:])
				}
			}
			s.write(dst, out)
		case "VBROADCASTSS":
			v, out := s.read(ops[0], 4), make([]byte, width)
			for i := 0; i < width; i += 4 {
				copy(out[i:], v)
			}
			s.write(dst, out)
		case "VXORPS", "VPAND", "VPCMPEQD":
			a, b, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := range out {
				switch mn {
				case "VXORPS":
					out[i] = a[i] ^ b[i]
				case "VPAND":
					out[i] = a[i] & b[i]
				}
			}
			if mn == "VPCMPEQD" {
				for i := 0; i < width; i += 4 {
					if binary.LittleEndian.Uint32(a[i:]) == binary.LittleEndian.Uint32(b[i:]) {
						binary.LittleEndian.PutUint32(out[i:], ^uint32(0))
					}
				}
			}
			s.write(dst, out)
		case "VPSRLW", "VPSRLD", "VPSLLD":
			k, a, out := s.scalar(ops[0]), s.read(ops[1], width), make([]byte, width)
			if mn == "VPSRLW" {
				for i := 0; i < width; i += 2 {
					binary.LittleEndian.PutUint16(out[i:], uint16(uint64(binary.LittleEndian.Uint16(a[i:]))>>k))
				}
			} else {
				for i := 0; i < width; i += 4 {
					v := uint64(binary.LittleEndian.Uint32(a[i:]))
					if mn == "VPSRLD" {
						v >>= k
					} else {
						v <<= k
					}
					binary.LittleEndian.PutUint32(out[i:], uint32(v))
				}
			}
			s.write(dst, out)
		case "VPSHUFB": // per 128-bit lane: out[j] = table[idx[j] & 15], 0 where idx's top bit is set
			idx, tab, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for j := range out {
				if idx[j]&0x80 == 0 {
					out[j] = tab[j&^15+int(idx[j]&15)]
				}
			}
			s.write(dst, out)
		case "VPUNPCKLBW", "VPUNPCKHBW", "VPUNPCKLWD", "VPUNPCKHWD": // per 128-bit lane
			src2, src1, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			el := 1
			if strings.HasSuffix(mn, "WD") {
				el = 2
			}
			half := 0
			if mn[7] == 'H' {
				half = 8
			}
			for lane := 0; lane < width; lane += 16 {
				for k := 0; k < 8/el; k++ {
					o := lane + 2*el*k
					copy(out[o:o+el], src1[lane+half+el*k:])
					copy(out[o+el:o+2*el], src2[lane+half+el*k:])
				}
			}
			s.write(dst, out)
		case "VPMADDWD": // per dword: src1's two int16 times src2's, the two int32 products summed (wrapping)
			src2, src1, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width; i += 4 {
				var sum int32
				for k := 0; k < 4; k += 2 {
					sum += int32(int16(binary.LittleEndian.Uint16(src1[i+k:]))) * int32(int16(binary.LittleEndian.Uint16(src2[i+k:])))
				}
				binary.LittleEndian.PutUint32(out[i:], uint32(sum))
			}
			s.write(dst, out)
		case "VPADDD": // per dword, wrapping
			src2, src1, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width; i += 4 {
				binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(src1[i:])+binary.LittleEndian.Uint32(src2[i:]))
			}
			s.write(dst, out)
		case "VCVTDQ2PS": // int32 to float32, rounded to nearest even (MXCSR's default)
			src, out := s.read(ops[0], width), make([]byte, width)
			for i := 0; i < lanes; i++ {
				putF32(out, i, float32(int32(binary.LittleEndian.Uint32(src[4*i:]))))
			}
			s.write(dst, out)
		case "VPERMPS", "VPERMD": // out[i] = table[idx[i] mod lanes], across the whole register
			tab, idx, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < lanes; i++ {
				j := int(binary.LittleEndian.Uint32(idx[4*i:])) & (lanes - 1)
				copy(out[4*i:4*i+4], tab[4*j:])
			}
			s.write(dst, out)
		case "VPERMQ": // $imm, src, dst: quadword i of dst is quadword (imm >> 2i) & 3 of src (256 bits)
			k, src, out := s.scalar(ops[0]), s.read(ops[1], 32), make([]byte, 32)
			for i := 0; i < 4; i++ {
				j := (k >> (2 * i)) & 3
				copy(out[8*i:8*i+8], src[8*j:])
			}
			s.write(dst, out)
		case "VPERMW": // out[i] = table[idx[i] mod words], words of 16 bits across the whole register
			tab, idx, out := s.read(ops[0], width), s.read(ops[1], width), make([]byte, width)
			for i := 0; i < width/2; i++ {
				j := int(binary.LittleEndian.Uint16(idx[2*i:])) & (width/2 - 1)
				copy(out[2*i:2*i+2], tab[2*j:])
			}
			s.write(dst, out)
		case "VPMOVZXBW": // each byte of the source's low half widened to a word, zero-extended
			src, out := s.read(ops[0], width/2), make([]byte, width)
			for i := 0; i < width/2; i++ {
				binary.LittleEndian.PutUint16(out[2*i:], uint16(src[i]))
			}
			s.write(dst, out)
		case "VBROADCASTI64X4": // 256 bits of memory into both halves of a zmm
			v := s.read(ops[0], 32)
			s.write(dst, append(append([]byte(nil), v...), v...))
		case "VPMOVZXBD":
			src, out := s.read(ops[0], lanes), make([]byte, width)
			for i := 0; i < lanes; i++ {
				binary.LittleEndian.PutUint32(out[4*i:], uint32(src[i]))
			}
			s.write(dst, out)
		case "VBLENDVPS": // mask, src2, src1, dst: the sign of mask picks src2 over src1
			mask, b, a, out := s.read(ops[0], width), s.read(ops[1], width), s.read(ops[2], width), make([]byte, width)
			for i := 0; i < width; i += 4 {
				if mask[i+3]&0x80 != 0 {
					copy(out[i:i+4], b[i:])
				} else {
					copy(out[i:i+4], a[i:])
				}
			}
			s.write(dst, out)
		case "VMULPS", "VADDPS", "VFMADD231PS":
			a, b, out := s.read(ops[0], width), s.read(ops[1], width), s.read(dst, width)
			for i := 0; i < lanes; i++ {
				x, y := f32At(b, i), f32At(a, i)
				switch mn {
				case "VMULPS":
					putF32(out, i, float32(x*y))
				case "VADDPS":
					putF32(out, i, float32(x+y))
				default:
					putF32(out, i, fma32(x, y, f32At(out, i)))
				}
			}
			s.write(dst, out)
		case "VADDSS": // the low float: src1 + src2; the rest of src1's 128 bits kept
			a, b := s.read(ops[0], 4), s.read(ops[1], 16)
			putF32(b, 0, float32(f32At(b, 0)+f32At(a, 0)))
			s.write(dst, b)
		case "VHADDPS": // xmm: src1's two pair sums, then src2's
			a, b, out := s.read(ops[0], 16), s.read(ops[1], 16), make([]byte, 16)
			putF32(out, 0, float32(f32At(b, 0)+f32At(b, 1)))
			putF32(out, 1, float32(f32At(b, 2)+f32At(b, 3)))
			putF32(out, 2, float32(f32At(a, 0)+f32At(a, 1)))
			putF32(out, 3, float32(f32At(a, 2)+f32At(a, 3)))
			s.write(dst, out)
		case "VEXTRACTF128", "VEXTRACTI128", "VEXTRACTF64X4":
			n := 16
			if mn == "VEXTRACTF64X4" {
				n = 32
			}
			k := int(s.scalar(ops[0]))
			src := s.read(ops[1], 64)
			s.write(dst, src[k*n:(k+1)*n])
		default:
			panic("asmsim: instruction not modelled: " + line)
		}
	}
	panic("asmsim: ran off the end of the function")
}

func (s *asmSim) jump(label string) int {
	pc, ok := s.labels[label]
	if !ok {
		panic("asmsim: no label " + label)
	}
	return pc
}
