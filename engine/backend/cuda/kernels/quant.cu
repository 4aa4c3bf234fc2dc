// 4-bit weights (NF4/FP4) in bitsandbytes' layout: the [rows, cols] weight flattened
// row-major, two codes a byte (high nibble first), blocks of 2^block_shift values with one
// scale each. Scales are float32 absmax, or (double quantization) 8-bit codes:
// scale[b] = nested_code[qabsmax[b]]·nested_absmax[b/256] + offset, rounded at each step as
// the CPU does, so that dequantization matches it bit for bit. code16 is the 16-value code
// book of the type.

__device__ __forceinline__ float block_scale(i64 b, const float* absmax, const u8* qabsmax, const float* nested_absmax,
                                             const float* ncode, float offset) {
    if (!qabsmax) return absmax[b];
    return add_rn(mul_rn(ncode[qabsmax[b]], nested_absmax[b >> 8]), offset);
}

// out[0:n] = bf16(code16[q]·scale). Each thread expands 16 values (8 packed bytes, one
// block: blocks hold at least 32); the grid strides over 16-value groups.
extern "C" __global__ void dequant4_bf16(bf16* out, const u8* packed, const float* absmax, const u8* qabsmax, const float* nested_absmax,
                                         const float* nested_code, const float* code16, float offset, i64 n, int block_shift) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = code16[i];
    if (qabsmax)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ncode[i] = nested_code[i];
    __syncthreads();
    i64 groups = (n + 15) >> 4;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (i64)gridDim.x * blockDim.x) {
        i64 j = g << 4;
        float s = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
        if (j + 16 <= n) {
            u32x2 q = *(const u32x2*)(packed + (j >> 1));
            u32 w[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                u32 b0 = (q.x >> (8 * k)) & 0xff, b1 = (q.y >> (8 * k)) & 0xff;
                w[k] = pack_bf16(mul_rn(code[b0 >> 4], s), mul_rn(code[b0 & 15], s));
                w[4 + k] = pack_bf16(mul_rn(code[b1 >> 4], s), mul_rn(code[b1 & 15], s));
            }
            u32x4* o = (u32x4*)(out + j);
            o[0] = u32x4{w[0], w[1], w[2], w[3]};
            o[1] = u32x4{w[4], w[5], w[6], w[7]};
        } else {
            for (i64 k = j; k < n; k++) {
                u8 b = packed[k >> 1];
                out[k] = f32_to_bf16(mul_rn(code[(k & 1) ? (b & 15) : (b >> 4)], s));
            }
        }
    }
}

// out[0:n] = code16[q]·scale in float32: the CPU's expansion bit for bit (a check, and
// float32 callers). One value a thread, grid-stride.
extern "C" __global__ void dequant4_f32(float* out, const u8* packed, const float* absmax, const u8* qabsmax, const float* nested_absmax,
                                        const float* nested_code, const float* code16, float offset, i64 n, int block_shift) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (i64)gridDim.x * blockDim.x) {
        float s = block_scale(k >> block_shift, absmax, qabsmax, nested_absmax, nested_code, offset);
        u8 b = packed[k >> 1];
        out[k] = mul_rn(code16[(k & 1) ? (b & 15) : (b >> 4)], s);
    }
}

#define GEMV_MAX_M 8
#define GEMV_ROWS 2

// q4_rows_dot adds to acc[q][mi] this lane's share of W[r0 + q]·x[mi] for R output features of a
// 4-bit weight expanded in registers (never stored) and m ≤ M rows of x: the inner loop of the
// decode products gemv4_bf16 and q4_linear_t. Each thread takes 8 weights (4 bytes) of a row a
// step, so a warp reads 128 contiguous bytes of each row; vec selects 16-byte loads of x. slot
// is the thread's place among nslots threads sharing the rows (a warp's lanes, or the lanes of
// every warp of a block when the columns are split over warps), which take the row's 8-weight
// pieces (single weights when not vec) in turn. Each step loads x's M rows unconditionally (row
// min(mi, m − 1): m ≥ 1) before the weights, so that the step waits once, not once per row.
template <int R, int M>
__device__ __forceinline__ void q4_rows_dot(float (&acc)[R][M], const bf16* x, int ldx, int m, const u8* packed, const float* absmax,
                                            const u8* qabsmax, const float* nested_absmax, const float* ncode, const float* code,
                                            float offset, int r0, int rows, int cols, int block_shift, int vec, int slot, int nslots) {
    if (vec) {
        for (int c = slot * 8; c < cols; c += nslots * 8) {
            // x's m rows first, all at once (a missing row repeats the last; its sums are not
            // stored), with the weights' packed bytes and scales, so that they go out as one
            // round trip; each feature's 8 weights are expanded only when its products run.
            // 8 weights a step, not 16: x's 8 rows of 16 then took 64 registers of the 167
            // q4_linears held a thread (12 warps an SM at 256 threads); now 32.
            u32 xs[M][4];
#pragma unroll
            for (int mi = 0; mi < M; mi++) {
                u32x4 a = *(const u32x4*)(x + (i64)min(mi, m - 1) * ldx + c);
                xs[mi][0] = a.x, xs[mi][1] = a.y, xs[mi][2] = a.z, xs[mi][3] = a.w;
            }
            u32 p[R];
            float sc[R];
#pragma unroll
            for (int q = 0; q < R; q++) {
                int r = min(r0 + q, rows - 1);  // a missing last row repeats one; its result is not stored
                i64 j = (i64)r * cols + c;
                sc[q] = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
                p[q] = *(const u32*)(packed + (j >> 1));
            }
#pragma unroll
            for (int q = 0; q < R; q++) {
                float w[8];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    u32 b = (p[q] >> (8 * k)) & 0xff;
                    w[2 * k] = code[b >> 4] * sc[q];
                    w[2 * k + 1] = code[b & 15] * sc[q];
                }
#pragma unroll
                for (int mi = 0; mi < M; mi++) {
                    float t = 0.f;
#pragma unroll
                    for (int k = 0; k < 4; k++) t += lo_bf16(xs[mi][k]) * w[2 * k] + hi_bf16(xs[mi][k]) * w[2 * k + 1];
                    acc[q][mi] += t;
                }
            }
        }
    } else {
        for (int c = slot; c < cols; c += nslots) {
            float xv[M];
#pragma unroll
            for (int mi = 0; mi < M; mi++) xv[mi] = bf16_to_f32(x[(i64)min(mi, m - 1) * ldx + c]);
            float w[R];
#pragma unroll
            for (int q = 0; q < R; q++) {
                int r = min(r0 + q, rows - 1);
                i64 j = (i64)r * cols + c;
                float s = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
                u8 b = packed[j >> 1];
                w[q] = code[(j & 1) ? (b & 15) : (b >> 4)] * s;
            }
#pragma unroll
            for (int mi = 0; mi < M; mi++)
#pragma unroll
                for (int q = 0; q < R; q++) acc[q][mi] += xv[mi] * w[q];
        }
    }
}

// y[m, rows] = x[m, cols]·Wᵀ for the few rows of a decode step (m ≤ 8), the 4-bit weight
// expanded in registers and never stored. Each warp computes GEMV_ROWS output features
// (each x load serves them all); each lane takes 8 weights (4 bytes) of a row a step, so
// a warp reads 128 contiguous bytes of each row. vec (cols a multiple of 16, x 16-byte
// aligned, ldx a multiple of 8) selects 16-byte loads of x; otherwise one value at a time.
extern "C" __global__ void __launch_bounds__(256, 2) gemv4_bf16(bf16* y, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax, const u8* qabsmax,
                                      const float* nested_absmax, const float* nested_code, const float* code16, float offset,
                                      int rows, int cols, int m, int block_shift, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = code16[i];
    if (qabsmax)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ncode[i] = nested_code[i];
    __syncthreads();
    int lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * GEMV_ROWS;
    if (r0 >= rows) return;  // the whole warp: no barrier follows
    float acc[GEMV_ROWS][GEMV_MAX_M];
#pragma unroll
    for (int q = 0; q < GEMV_ROWS; q++)
#pragma unroll
        for (int k = 0; k < GEMV_MAX_M; k++) acc[q][k] = 0.f;
    q4_rows_dot<GEMV_ROWS, GEMV_MAX_M>(acc, x, ldx, m, packed, absmax, qabsmax, nested_absmax, ncode, code, offset, r0, rows, cols, block_shift, vec, lane, 32);
#pragma unroll
    for (int q = 0; q < GEMV_ROWS; q++) {
#pragma unroll
        for (int mi = 0; mi < GEMV_MAX_M; mi++) {
            if (mi < m) {
                float v = warp_sum(acc[q][mi]);
                if (lane == 0 && r0 + q < rows) y[(i64)mi * ldy + r0 + q] = f32_to_bf16(v);
            }
        }
    }
}
