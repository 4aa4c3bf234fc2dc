package cpu

import "math"

// RoPETable holds the cos/sin tables of rotary position embeddings for one head size:
// angle(p, i) = p·invFreq[i] for the pair (i, i+half) of each head, "rotate-half" layout.
type RoPETable struct {
	Half     int
	MaxPos   int
	HeadDim  int       // width of a head in the rotated rows, 0: 2·Half (more: partial rotary)
	cos, sin []float32 // [MaxPos, Half]
}

// NewRoPETable tabulates cos and sin for positions [0, maxPos) in float64 and stores them as
// float32; invFreq has headDim/2 entries.
func NewRoPETable(invFreq []float64, maxPos int) *RoPETable {
	half := len(invFreq)
	r := &RoPETable{Half: half, MaxPos: maxPos, cos: make([]float32, maxPos*half), sin: make([]float32, maxPos*half)}
	for p := 0; p < maxPos; p++ {
		for i, f := range invFreq {
			s, c := math.Sincos(float64(p) * f)
			r.cos[p*half+i], r.sin[p*half+i] = float32(c), float32(s)
		}
	}
	return r
}

// RoPEForward rotates x [rows, heads·HeadDim] in place, row r at position pos[r]:
// (a, b) → (a·cos − b·sin, b·cos + a·sin) for a = x[i], b = x[i+Half] of each head; a head's
// dimensions from 2·Half on are left as they are (partial rotary).
func RoPEForward(x []float32, pos []int32, heads int, r *RoPETable) {
	r.rotate(x, pos, heads, 1)
}

// RoPEBackward turns the gradient of the rotated x into the gradient of x, in place: the
// rotation is orthogonal, so this is the rotation by −angle.
func RoPEBackward(dx []float32, pos []int32, heads int, r *RoPETable) {
	r.rotate(dx, pos, heads, -1)
}

func (r *RoPETable) rotate(x []float32, pos []int32, heads int, sign float32) {
	half, hd := r.Half, 2*r.Half
	if r.HeadDim > 0 {
		hd = r.HeadDim
	}
	width := heads * hd
	For(len(pos), grainFor(width), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			p := int(pos[row])
			cs, sn := r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half]
			for h := 0; h < heads; h++ {
				a := x[row*width+h*hd : row*width+h*hd+half]
				b := x[row*width+h*hd+half : row*width+h*hd+2*half]
				for i := range a {
					c, s := cs[i], sign*sn[i]
					a[i], b[i] = a[i]*c-b[i]*s, b[i]*c+a[i]*s
				}
			}
		}
	})
}
