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

// y[m, rows] = res + x[m, cols]·Wᵀ + bias + scale·xa·Bᵀ: a 4-bit linear of a decode step with
// its bias, LoRA term (xa [m, rank] ldxa apart, B [rows, rank], bf16) and residual, W expanded
// in registers and never stored. As gemv4_bf16: a warp takes Q4L_ROWS output features, each
// lane 16 weights of a row a step; blockIdx.y takes Q4L_M rows of x (the weight is read
// again per 8 rows, from L2 after the first). The LoRA term is spread over the lanes (lane k
// takes ranks k, k+32…) and joins the product's warp sum.
template <typename T>
__device__ void q4_linear_t(T* y, const T* res, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax, const u8* qabsmax,
                            const float* nested_absmax, const float* nested_code, const float* code16, float offset, const float* bias,
                            const bf16* xa, int ldxa, const bf16* lb, int rank, float scale, int rows, int cols, int m, int block_shift,
                            int vec, float* code, float* ncode) {
    for (int i = threadIdx.x; i < 16; i += blockDim.x) code[i] = code16[i];
    if (qabsmax)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ncode[i] = nested_code[i];
    __syncthreads();
    int lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * Q4L_ROWS;
    int m0 = blockIdx.y * Q4L_M;
    if (r0 >= rows) return;  // the whole warp: no barrier follows
    m = min(m - m0, Q4L_M);
    x += (i64)m0 * ldx;
    float acc[Q4L_ROWS][Q4L_M];
#pragma unroll
    for (int q = 0; q < Q4L_ROWS; q++)
#pragma unroll
        for (int k = 0; k < Q4L_M; k++) acc[q][k] = 0.f;
    if (vec) {
        for (int c = lane * 16; c < cols; c += 32 * 16) {
            float w[Q4L_ROWS][16];
#pragma unroll
            for (int q = 0; q < Q4L_ROWS; q++) {
                int r = min(r0 + q, rows - 1);  // a missing last row repeats one; its result is not stored
                i64 j = (i64)r * cols + c;
                float s = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
                u32x2 p = *(const u32x2*)(packed + (j >> 1));
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    u32 b0 = (p.x >> (8 * k)) & 0xff, b1 = (p.y >> (8 * k)) & 0xff;
                    w[q][2 * k] = code[b0 >> 4] * s;
                    w[q][2 * k + 1] = code[b0 & 15] * s;
                    w[q][8 + 2 * k] = code[b1 >> 4] * s;
                    w[q][8 + 2 * k + 1] = code[b1 & 15] * s;
                }
            }
#pragma unroll
            for (int mi = 0; mi < Q4L_M; mi++) {
                if (mi < m) {
                    const u32x4* xp = (const u32x4*)(x + (i64)mi * ldx + c);
                    u32x4 a = xp[0], b = xp[1];
                    u32 xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                    for (int q = 0; q < Q4L_ROWS; q++) {
                        float t = 0.f;
#pragma unroll
                        for (int k = 0; k < 8; k++) t += lo_bf16(xs[k]) * w[q][2 * k] + hi_bf16(xs[k]) * w[q][2 * k + 1];
                        acc[q][mi] += t;
                    }
                }
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float w[Q4L_ROWS];
#pragma unroll
            for (int q = 0; q < Q4L_ROWS; q++) {
                int r = min(r0 + q, rows - 1);
                i64 j = (i64)r * cols + c;
                float s = block_scale(j >> block_shift, absmax, qabsmax, nested_absmax, ncode, offset);
                u8 b = packed[j >> 1];
                w[q] = code[(j & 1) ? (b & 15) : (b >> 4)] * s;
            }
#pragma unroll
            for (int mi = 0; mi < Q4L_M; mi++) {
                if (mi < m) {
                    float xv = bf16_to_f32(x[(i64)mi * ldx + c]);
#pragma unroll
                    for (int q = 0; q < Q4L_ROWS; q++) acc[q][mi] += xv * w[q];
                }
            }
        }
    }
    if (xa) {
        xa += (i64)m0 * ldxa;
#pragma unroll
        for (int q = 0; q < Q4L_ROWS; q++) {
            const bf16* bq = lb + (i64)min(r0 + q, rows - 1) * rank;
#pragma unroll
            for (int mi = 0; mi < Q4L_M; mi++) {
                if (mi < m) {
                    float t = 0.f;
                    for (int k = lane; k < rank; k += 32) t += bf16_to_f32(xa[(i64)mi * ldxa + k]) * bf16_to_f32(bq[k]);
                    acc[q][mi] += scale * t;
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < Q4L_ROWS; q++) {
#pragma unroll
        for (int mi = 0; mi < Q4L_M; mi++) {
            if (mi < m) {
                float v = warp_sum(acc[q][mi]);
                int r = r0 + q;
                if (lane == 0 && r < rows) {
                    i64 o = (i64)(m0 + mi) * ldy + r;
                    if (bias) v += bias[r];
                    if (res) v = ldf(res + o) + v;
                    stf(y + o, v);
                }
            }
        }
    }
}

extern "C" __global__ void q4_linear_bf16(bf16* y, const bf16* res, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax,
                                          const u8* qabsmax, const float* nested_absmax, const float* nested_code, const float* code16,
                                          float offset, const float* bias, const bf16* xa, int ldxa, const bf16* lb, int rank, float scale,
                                          int rows, int cols, int m, int block_shift, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    q4_linear_t(y, res, ldy, x, ldx, packed, absmax, qabsmax, nested_absmax, nested_code, code16, offset, bias, xa, ldxa, lb, rank, scale,
                rows, cols, m, block_shift, vec, code, ncode);
}

extern "C" __global__ void q4_linear_f32(float* y, const float* res, int ldy, const bf16* x, int ldx, const u8* packed, const float* absmax,
                                         const u8* qabsmax, const float* nested_absmax, const float* nested_code, const float* code16,
                                         float offset, const float* bias, const bf16* xa, int ldxa, const bf16* lb, int rank, float scale,
                                         int rows, int cols, int m, int block_shift, int vec) {
    __shared__ float code[16];
    __shared__ float ncode[256];
    q4_linear_t(y, res, ldy, x, ldx, packed, absmax, qabsmax, nested_absmax, nested_code, code16, offset, bias, xa, ldxa, lb, rank, scale,
                rows, cols, m, block_shift, vec, code, ncode);
}
