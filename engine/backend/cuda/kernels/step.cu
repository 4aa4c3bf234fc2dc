// The decode step's own kernels: every index read from device memory, so that the step can
// be captured as a graph and replayed token after token.

// Row r of k and of v [rows, width] into the caches at seq[r]·seq_stride + pos[r]·width:
// one launch for both (blockIdx.y picks k or v), a block per row.
template <typename T>
__device__ void append_kv_t(T* kc, T* vc, const T* k, const T* v, const int* seq, const int* pos, int width, i64 seq_stride) {
    int r = blockIdx.x;
    T* dst = (blockIdx.y ? vc : kc) + (i64)seq[r] * seq_stride + (i64)pos[r] * width;
    const T* src = (blockIdx.y ? v : k) + (i64)r * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}
extern "C" __global__ void append_kv(bf16* kc, bf16* vc, const bf16* k, const bf16* v, const int* seq, const int* pos, int width,
                                     i64 seq_stride) {
    append_kv_t(kc, vc, k, v, seq, pos, width, seq_stride);
}
extern "C" __global__ void append_kv_f32(float* kc, float* vc, const float* k, const float* v, const int* seq, const int* pos, int width,
                                         i64 seq_stride) {
    append_kv_t(kc, vc, k, v, seq, pos, width, seq_stride);
}

// pos[r] = min(pos[r] + 1, limit − 1): the next step's positions (finished rows stay put).
extern "C" __global__ void advance_pos(int* pos, int rows, int limit) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) pos[r] = min(pos[r] + 1, limit - 1);
}

#define Q4L_M 8
#define Q4L_ROWS 2
#define Q4L_WARPS 8

// y[m, rows] = res + x[m, cols]·Wᵀ + bias + scale·xa·Bᵀ: a 4-bit linear of a decode step with
// its bias, LoRA term (xa [m, rank] ldxa apart, B [rows, rank], bf16) and residual, W expanded
// in registers and never stored. A block takes Q4L_ROWS output features and blockIdx.y Q4L_M
// rows of x (the weight is read again per 8 rows, from L2 after the first); its warps (up to
// Q4L_WARPS) split the columns, each thread taking 8 weights of a row a step. A decode step's
// few rows leave a product too little work to hide memory latency when a warp walks whole
// rows (on an H200, 23–38 µs for Qwen2.5-0.5B's linears, 8 rows): split so, a 896-column row
// takes two warps and a 4864-column one eight, and far more warps are in flight. Each warp's
// sums meet in shared memory with the LoRA term (its ranks spread over all the block's threads);
// 16 threads add bias and residual and store.
template <typename T>
__device__ void q4_linear_t(T* y, const T* res, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax, const u8* qabsmax,
                            const float* nested_absmax, const float* nested_code, const float* code16, float offset, const float* bias,
                            const bf16* xa, int ldxa, const bf16* lb, int rank, float scale, int rows, int cols, int m, int block_shift,
                            int vec, int bx, float* code, float* ncode, float (*red)[Q4L_ROWS][Q4L_M]) {
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = code16[i];
    if (qabsmax)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ncode[i] = nested_code[i];
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int r0 = bx * Q4L_ROWS;
    int m0 = blockIdx.y * Q4L_M;
    if (r0 >= rows) return;  // the whole block: no barrier follows
    m = min(m - m0, Q4L_M);
    x += (i64)m0 * ldx;
    float acc[Q4L_ROWS][Q4L_M];
#pragma unroll
    for (int q = 0; q < Q4L_ROWS; q++)
#pragma unroll
        for (int k = 0; k < Q4L_M; k++) acc[q][k] = 0.f;
    q4_rows_dot<Q4L_ROWS, Q4L_M>(acc, x, ldx, m, packed, absmax, qabsmax, nested_absmax, ncode, code, offset, r0, rows, cols, block_shift, vec,
                                 threadIdx.x, blockDim.x);
    if (xa) {
        // The LoRA term over the whole block: thread t takes ranks t, t + blockDim.x… of every
        // row and feature, its loads (rows clamped as in q4_rows_dot) going out together.
        xa += (i64)m0 * ldxa;
        for (int k = threadIdx.x; k < rank; k += blockDim.x) {
            float bk[Q4L_ROWS];
#pragma unroll
            for (int q = 0; q < Q4L_ROWS; q++) bk[q] = bf16_to_f32(lb[(i64)min(r0 + q, rows - 1) * rank + k]);
#pragma unroll
            for (int mi = 0; mi < Q4L_M; mi++) {
                float a = scale * bf16_to_f32(xa[(i64)min(mi, m - 1) * ldxa + k]);
#pragma unroll
                for (int q = 0; q < Q4L_ROWS; q++) acc[q][mi] += a * bk[q];
            }
        }
    }
#pragma unroll
    for (int q = 0; q < Q4L_ROWS; q++) {
#pragma unroll
        for (int mi = 0; mi < Q4L_M; mi++) {
            if (mi < m) {
                float v = warp_sum(acc[q][mi]);
                if (lane == 0) red[warp][q][mi] = v;
            }
        }
    }
    __syncthreads();
    int t = threadIdx.x, q = t / Q4L_M, mi = t % Q4L_M, r = r0 + q;
    if (t < Q4L_ROWS * Q4L_M && mi < m && r < rows) {
        float v = 0.f;
        for (int w = 0; w < warps; w++) v += red[w][q][mi];
        i64 o = (i64)(m0 + mi) * ldy + r;
        if (bias) v += bias[r];
        if (res) v = ldf(res + o) + v;
        stf(y + o, v);
    }
}

// x[0:n] *= s: ScaleAll of one tensor with its address a launch argument, not in a table
// uploaded per call (a decode step captured as a graph uploads nothing: gemma's √dim
// embedding scale).
extern "C" __global__ void scale_f32(float* x, i64 n, float s) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) x[i] = s == 0.f ? 0.f : x[i] * s;
}

#define Q4TC_WARPS 32  // at most; the launch picks 8 to 32 (decode.go, q4TcWarps)

// q4_linear on the tensor cores for 16 rows and more (cols a multiple of 16): a block takes 16
// rows of x (blockIdx.y) and 16 output features, and its warps split the columns (warp w the
// 16-column steps w, w + warps…, as q4_linear_t's warps do: a warp walking a whole row waits
// on every step's loads in turn; a down product's 14,336 columns take 32 warps 28 steps
// each), each step as two m16n8k16 tiles. Each lane
// expands the 4 weights of its B fragments from 2 packed bytes (one scale: a 16-column step
// stays inside a quantization block) and rounds them to bf16 in registers; x is read as bf16
// pairs. The warps' tiles meet in shared memory (the launch's dynamic shared memory, 1 KB a
// warp; a fixed order: the same sums every run); then
// each of the block's 256 threads takes one of the 16 × 16 outputs and adds its LoRA term
// (its rank loop), bias and residual.
template <typename T>
__device__ void q4_linear_tc_t(T* y, const T* res, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax,
                               const u8* qabsmax, const float* nested_absmax, const float* nested_code, const float* code16, float offset,
                               const float* bias, const bf16* xa, int ldxa, const bf16* lb, int rank, float scale, int rows, int cols, int m,
                               int block_shift, int vec, int bx, float* code, float* ncode, float (*tile)[16][16]) {
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = code16[i];
    if (qabsmax)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ncode[i] = nested_code[i];
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, g = lane >> 2, t = lane & 3;
    int n0 = bx * 16, m0 = blockIdx.y * 16;
    int ra = m0 + g, rb = m0 + g + 8;
    float d[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    for (int k0 = warp * 16; k0 < cols; k0 += 16 * warps) {
        u32 a[4];
        a[0] = ra < m ? *(const u32*)(x + (i64)ra * ldx + k0 + 2 * t) : 0u;
        a[1] = rb < m ? *(const u32*)(x + (i64)rb * ldx + k0 + 2 * t) : 0u;
        a[2] = ra < m ? *(const u32*)(x + (i64)ra * ldx + k0 + 2 * t + 8) : 0u;
        a[3] = rb < m ? *(const u32*)(x + (i64)rb * ldx + k0 + 2 * t + 8) : 0u;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int f = n0 + 8 * i + g;
            u32 b[2] = {0u, 0u};
            if (f < rows) {
                i64 j = (i64)f * cols + k0 + 2 * t;
                float s = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
                u8 p0 = packed[j >> 1], p1 = packed[(j + 8) >> 1];
                b[0] = pack_bf16(code[p0 >> 4] * s, code[p0 & 15] * s);
                b[1] = pack_bf16(code[p1 >> 4] * s, code[p1 & 15] * s);
            }
            mma_bf16_16816(d[i], a, b);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) tile[warp][g + (e < 2 ? 0 : 8)][8 * i + 2 * t + (e & 1)] = d[i][e];
    __syncthreads();
    int rl = threadIdx.x >> 4, fl = threadIdx.x & 15, r = m0 + rl, f = n0 + fl;
    if (threadIdx.x >= 256 || r >= m || f >= rows) return;
    float v = 0.f;
    for (int w = 0; w < warps; w++) v += tile[w][rl][fl];
    if (xa) {
        const bf16 *xr = xa + (i64)r * ldxa, *br = lb + (i64)f * rank;
        float l = 0.f;
        if (vec & 2) {  // rank, ldxa and the columns' offset multiples of 8, xa and B 16-byte aligned: 8 ranks a load
            for (int k = 0; k < rank; k += 8) {
                u32x4 a = *(const u32x4*)(xr + k), b = *(const u32x4*)(br + k);
                l += lo_bf16(a.x) * lo_bf16(b.x) + hi_bf16(a.x) * hi_bf16(b.x) + lo_bf16(a.y) * lo_bf16(b.y) + hi_bf16(a.y) * hi_bf16(b.y) +
                     lo_bf16(a.z) * lo_bf16(b.z) + hi_bf16(a.z) * hi_bf16(b.z) + lo_bf16(a.w) * lo_bf16(b.w) + hi_bf16(a.w) * hi_bf16(b.w);
            }
        } else {
            for (int k = 0; k < rank; k++) l += bf16_to_f32(xr[k]) * bf16_to_f32(br[k]);
        }
        v += scale * l;
    }
    if (bias) v += bias[f];
    i64 o = (i64)r * ldy + f;
    if (res) v = ldf(res + o) + v;
    stf(y + o, v);
}

// A 4-bit weight's device form as one launch of several weights reads it: eight words that
// UploadQ4 writes once beside the weight (packed, absmax, qabsmax, nested absmax, nested
// code, code book, rows | block shift << 32, offset's bits).
struct q4_desc {
    const u8* packed;
    const float* absmax;
    const u8* qabsmax;
    const float* nested_absmax;
    const float* nested_code;
    const float* code;
    int rows, block_shift;
    float offset;
};
__device__ __forceinline__ q4_desc q4_desc_of(const u64* w) {
    q4_desc d;
    d.packed = (const u8*)w[0];
    d.absmax = (const float*)w[1];
    d.qabsmax = (const u8*)w[2];
    d.nested_absmax = (const float*)w[3];
    d.nested_code = (const float*)w[4];
    d.code = (const float*)w[5];
    d.rows = (int)(w[6] & 0xffffffffu);
    d.block_shift = (int)(w[6] >> 32);
    d.offset = __uint_as_float((u32)w[7]);
    return d;
}

// The member of a group of up to three linears (w1, w2 null for fewer) that block *bx of a
// launch falls in, each member taking ceil(rows/per) blocks in order; *bx becomes the block's
// index within the member.
__device__ __forceinline__ int q4_member(const u64* w0, const u64* w1, const u64* w2, int per, int* bx) {
    int n0 = ((int)(w0[6] & 0xffffffffu) + per - 1) / per;
    if (!w1 || *bx < n0) return 0;
    *bx -= n0;
    int n1 = ((int)(w1[6] & 0xffffffffu) + per - 1) / per;
    if (!w2 || *bx < n1) return 1;
    *bx -= n1;
    return 2;
}

// q4_linears: y_i = res_i + x·W_iᵀ + bias_i + scale·xa_i·B_iᵀ for up to three linears sharing x
// (a block's q, k and v; gate and up; or one linear alone) in one launch: the blocks index
// the members' output features one member after the other, each block running q4_linear_t
// (or, the _tc kernels, q4_linear_tc_t) on its member. Member i's LoRA term, with lb_i, reads
// its rank columns at off_i of xa (the group's x·Aᵀ, ldxa apart); y_i is [m, rows_i]. feats
// is Σ rows_i (the ledger's count).
template <typename T, bool TC>
__device__ void q4_linears_t(const u64* w0, const u64* w1, const u64* w2, T* y0, T* y1, T* y2, const T* res0, const T* res1, const T* res2,
                             const float* bias0, const float* bias1, const float* bias2, const bf16* lb0, const bf16* lb1, const bf16* lb2,
                             int off0, int off1, int off2, const bf16* x, int ldx, const bf16* xa, int ldxa, int rank, float scale, int cols,
                             int m, int vec, float* code, float* ncode, float (*red)[Q4L_ROWS][Q4L_M], float (*tile)[16][16]) {
    int bx = blockIdx.x;
    int i = q4_member(w0, w1, w2, TC ? 16 : Q4L_ROWS, &bx);
    q4_desc q = q4_desc_of(i == 0 ? w0 : i == 1 ? w1 : w2);
    T* y = i == 0 ? y0 : i == 1 ? y1 : y2;
    const T* res = i == 0 ? res0 : i == 1 ? res1 : res2;
    const float* bias = i == 0 ? bias0 : i == 1 ? bias1 : bias2;
    const bf16* lb = i == 0 ? lb0 : i == 1 ? lb1 : lb2;
    const bf16* xai = lb ? xa + (i == 0 ? off0 : i == 1 ? off1 : off2) : (const bf16*)0;
    if (TC)
        q4_linear_tc_t(y, res, q.rows, x, ldx, q.packed, q.absmax, q.qabsmax, q.nested_absmax, q.nested_code, q.code, q.offset, bias, xai,
                       ldxa, lb, rank, scale, q.rows, cols, m, q.block_shift, vec, bx, code, ncode, tile);
    else
        q4_linear_t(y, res, q.rows, x, ldx, q.packed, q.absmax, q.qabsmax, q.nested_absmax, q.nested_code, q.code, q.offset, bias, xai, ldxa,
                    lb, rank, scale, q.rows, cols, m, q.block_shift, vec, bx, code, ncode, red);
}

extern "C" __global__ void __launch_bounds__(Q4L_WARPS * 32, 2) q4_linears_bf16(const u64* w0, const u64* w1, const u64* w2, bf16* y0, bf16* y1, bf16* y2, const bf16* res0, const bf16* res1, const bf16* res2,
                const float* bias0, const float* bias1, const float* bias2, const bf16* lb0, const bf16* lb1, const bf16* lb2, int off0,
                int off1, int off2, const bf16* x, int ldx, const bf16* xa, int ldxa, int rank, float scale, int cols, int m, int feats, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    __shared__ float red[Q4L_WARPS][Q4L_ROWS][Q4L_M];
    q4_linears_t<bf16, false>(w0, w1, w2, y0, y1, y2, res0, res1, res2, bias0, bias1, bias2, lb0, lb1, lb2, off0, off1, off2, x, ldx, xa, ldxa, rank, scale, cols, m, vec, code, ncode, red, 0);
}

extern "C" __global__ void __launch_bounds__(Q4L_WARPS * 32, 2) q4_linears_f32(const u64* w0, const u64* w1, const u64* w2, float* y0, float* y1, float* y2, const float* res0, const float* res1, const float* res2,
                const float* bias0, const float* bias1, const float* bias2, const bf16* lb0, const bf16* lb1, const bf16* lb2, int off0,
                int off1, int off2, const bf16* x, int ldx, const bf16* xa, int ldxa, int rank, float scale, int cols, int m, int feats, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    __shared__ float red[Q4L_WARPS][Q4L_ROWS][Q4L_M];
    q4_linears_t<float, false>(w0, w1, w2, y0, y1, y2, res0, res1, res2, bias0, bias1, bias2, lb0, lb1, lb2, off0, off1, off2, x, ldx, xa, ldxa, rank, scale, cols, m, vec, code, ncode, red, 0);
}

extern "C" __global__ void __launch_bounds__(Q4TC_WARPS * 32) q4_linears_tc_bf16(const u64* w0, const u64* w1, const u64* w2, bf16* y0, bf16* y1, bf16* y2, const bf16* res0, const bf16* res1, const bf16* res2,
                const float* bias0, const float* bias1, const float* bias2, const bf16* lb0, const bf16* lb1, const bf16* lb2, int off0,
                int off1, int off2, const bf16* x, int ldx, const bf16* xa, int ldxa, int rank, float scale, int cols, int m, int feats, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    DYNAMIC_SHARED(float, tiles);
    float(*tile)[16][16] = (float(*)[16][16])tiles;
    q4_linears_t<bf16, true>(w0, w1, w2, y0, y1, y2, res0, res1, res2, bias0, bias1, bias2, lb0, lb1, lb2, off0, off1, off2, x, ldx, xa, ldxa, rank, scale, cols, m, vec, code, ncode, 0, tile);
}

extern "C" __global__ void __launch_bounds__(Q4TC_WARPS * 32) q4_linears_tc_f32(const u64* w0, const u64* w1, const u64* w2, float* y0, float* y1, float* y2, const float* res0, const float* res1, const float* res2,
                const float* bias0, const float* bias1, const float* bias2, const bf16* lb0, const bf16* lb1, const bf16* lb2, int off0,
                int off1, int off2, const bf16* x, int ldx, const bf16* xa, int ldxa, int rank, float scale, int cols, int m, int feats, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    DYNAMIC_SHARED(float, tiles);
    float(*tile)[16][16] = (float(*)[16][16])tiles;
    q4_linears_t<float, true>(w0, w1, w2, y0, y1, y2, res0, res1, res2, bias0, bias1, bias2, lb0, lb1, lb2, off0, off1, off2, x, ldx, xa, ldxa, rank, scale, cols, m, vec, code, ncode, 0, tile);
}

#define GNT_M 8       // rows of A a block
#define GNT_N 2       // columns of C (rows of B) a block (4 spill at 512 threads: A's 8 rows × 8 values are live)
#define GNT_WARPS 16  // at most

// C[m, n] = alpha·A[m, k]·B[n, k]ᵀ + beta·C for a few rows and a narrow C: GEMM(false, true)
// with m ≤ 64 and n ≤ 256, LoRA's x·Aᵀ in a decode step. Through cuBLAS that product was two
// graph nodes of a captured step (a split-K kernel and its reduction, about 4.5 µs each on an
// H200); here it is one. A block takes GNT_N columns of C (rows of B) and GNT_M rows of A
// (blockIdx.y), each A value it loads serving its GNT_N columns; its threads split k, 8 values
// a load (vec: k, lda and ldb multiples of 8, A and B 16-byte aligned; one value otherwise),
// so that at 16 warps a row of 4,096 is one step of the loop and one of 14,336 four. Rows past
// m and columns past n read the last one's values (not stored), so that a step's loads go
// out together; the warps meet in shared memory in a fixed order (the same sums every run).
// beta = 0 writes C unread. With rnd, float32 inputs are rounded to bf16 as they are read:
// what cuBLAS's path does to them (gemmMixed) unless A, B and C are all float32.
__device__ __forceinline__ float ld_rnd(const float* p, bool rnd) { return rnd ? bf16_to_f32(f32_to_bf16(*p)) : *p; }
__device__ __forceinline__ float ld_rnd(const bf16* p, bool) { return bf16_to_f32(*p); }
__device__ __forceinline__ void ld8_rnd(float (&v)[8], const float* p, bool rnd) {
    u32x4 a = ((const u32x4*)p)[0], b = ((const u32x4*)p)[1];
    u32 t[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = rnd ? bf16_to_f32(f32_to_bf16(__uint_as_float(t[e]))) : __uint_as_float(t[e]);
}
__device__ __forceinline__ void ld8_rnd(float (&v)[8], const bf16* p, bool) {
    u32x4 a = *(const u32x4*)p;
    u32 t[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int e = 0; e < 4; e++) v[2 * e] = lo_bf16(t[e]), v[2 * e + 1] = hi_bf16(t[e]);
}
template <typename TC, typename TA, typename TB>
__device__ void gemm_nt_few_t(TC* c, int ldc, const TA* a, int lda, const TB* b, int ldb, int m, int n, int k, float alpha, float beta,
                              bool rnd, bool vec, float (*red)[GNT_M * GNT_N]) {
    int j0 = blockIdx.x * GNT_N, m0 = blockIdx.y * GNT_M, mm = min(m - m0, GNT_M), nn = min(n - j0, GNT_N);
    const TA* ar = a + (i64)m0 * lda;
    const TB* bj = b + (i64)j0 * ldb;
    float acc[GNT_M][GNT_N];
#pragma unroll
    for (int r = 0; r < GNT_M; r++)
#pragma unroll
        for (int q = 0; q < GNT_N; q++) acc[r][q] = 0.f;
    if (vec) {
        for (int i = threadIdx.x * 8; i < k; i += blockDim.x * 8) {
            float w[GNT_N][8];
#pragma unroll
            for (int q = 0; q < GNT_N; q++) ld8_rnd(w[q], bj + (i64)min(q, nn - 1) * ldb + i, rnd);
#pragma unroll
            for (int r = 0; r < GNT_M; r++) {
                float x[8];
                ld8_rnd(x, ar + (i64)min(r, mm - 1) * lda + i, rnd);  // unconditional: one round trip
#pragma unroll
                for (int q = 0; q < GNT_N; q++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][q] += x[e] * w[q][e];
            }
        }
    } else {
        for (int i = threadIdx.x; i < k; i += blockDim.x) {
            float w[GNT_N];
#pragma unroll
            for (int q = 0; q < GNT_N; q++) w[q] = ld_rnd(bj + (i64)min(q, nn - 1) * ldb + i, rnd);
#pragma unroll
            for (int r = 0; r < GNT_M; r++) {
                float x = ld_rnd(ar + (i64)min(r, mm - 1) * lda + i, rnd);
#pragma unroll
                for (int q = 0; q < GNT_N; q++) acc[r][q] += x * w[q];
            }
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int r = 0; r < GNT_M; r++)
#pragma unroll
        for (int q = 0; q < GNT_N; q++) {
            float v = warp_sum(acc[r][q]);
            if (lane == 0) red[warp][r * GNT_N + q] = v;
        }
    __syncthreads();
    int t = threadIdx.x, r = t / GNT_N, q = t % GNT_N;
    if (t < GNT_M * GNT_N && r < mm && q < nn) {
        float v = 0.f;
        for (int w = 0; w < warps; w++) v += red[w][t];
        i64 o = (i64)(m0 + r) * ldc + j0 + q;
        v *= alpha;
        if (beta != 0.f) v += beta * ldf(c + o);
        stf(c + o, v);
    }
}

// The operands' types are flags (1: float32, 0: bf16), one kernel for the eight mixtures.
extern "C" __global__ void __launch_bounds__(GNT_WARPS * 32) gemm_nt_few(u8* c, int c_f32, int ldc, const u8* a, int a_f32, int lda,
                                                                      const u8* b, int b_f32, int ldb, int m, int n, int k, float alpha,
                                                                      float beta, int vec) {
    __shared__ float red[GNT_WARPS][GNT_M * GNT_N];
    bool rnd = !(a_f32 && b_f32 && c_f32);
#define GNT_B(TC, TA)                                                                                                \
    if (b_f32)                                                                                                       \
        gemm_nt_few_t((TC*)c, ldc, (const TA*)a, lda, (const float*)b, ldb, m, n, k, alpha, beta, rnd, vec != 0, red); \
    else                                                                                                             \
        gemm_nt_few_t((TC*)c, ldc, (const TA*)a, lda, (const bf16*)b, ldb, m, n, k, alpha, beta, rnd, vec != 0, red);
#define GNT_A(TC)          \
    if (a_f32) {           \
        GNT_B(TC, float)   \
    } else {               \
        GNT_B(TC, bf16)    \
    }
    if (c_f32) {
        GNT_A(float)
    } else {
        GNT_A(bf16)
    }
#undef GNT_A
#undef GNT_B
}
