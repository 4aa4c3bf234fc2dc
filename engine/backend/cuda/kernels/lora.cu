// The backward of linears sharing their input (a block's q, k and v; gate and up; o; down),
// each a 4-bit weight with a LoRA adapter (A [r, in], B [out, r], float32) or none, in three
// launches whatever the number of linears: lora_grads (every adapter's dB and dxa = s·dy·B,
// and the dy's side by side in bf16 for the base product), one cuBLAS product over the
// weights stacked (dx = dy·W), then lora_in (every adapter's dA = dxaᵀ·x and dx += dxa·A).
// Up to three linears; linear i has out_i features, its dy rows ldy_i = out_i apart, and,
// with an adapter (b_i not null), r ranks at columns off_i of xa [rows, ldxa] and of dxa
// [rows, width]. Every output element has one thread: the sums are deterministic.


// The linear holding column c of the stacked outputs, and c's column in it.
__device__ __forceinline__ int lora_member(int c, int o0, int o1, int* col) {
    if (c < o0) {
        *col = c;
        return 0;
    }
    if (c < o0 + o1) {
        *col = c - o0;
        return 1;
    }
    *col = c - o0 - o1;
    return 2;
}

// Thread jobs over one flat index: [0, nb) the adapters' dB (out_i·r each), [nb, nb + rows·width)
// dxa, then rows·Σout copies of dy into dy16 [rows, Σout].
template <typename T>
__device__ void lora_grads_t(bf16* dy16, float* dxa, float* gb0, float* gb1, float* gb2, const T* dy0, const T* dy1, const T* dy2,
                             const float* b0, const float* b1, const float* b2, int out0, int out1, int out2, int off0, int off1,
                             int off2, const bf16* xa, int ldxa, int width, int rows, int r, float scale) {
    float* gb[3] = {gb0, gb1, gb2};
    const T* dy[3] = {dy0, dy1, dy2};
    const float* lb[3] = {b0, b1, b2};
    int out[3] = {out0, out1, out2}, off[3] = {off0, off1, off2};
    i64 nb = 0;
    for (int i = 0; i < 3; i++)
        if (lb[i]) nb += (i64)out[i] * r;
    i64 nx = (i64)rows * width, tot = out0 + out1 + out2, nc = (i64)rows * tot;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < nb + nx + nc; t += (i64)gridDim.x * blockDim.x) {
        if (t < nb) {  // dB[o, k] += s·Σ_rows dy[row, o]·xa[row, off + k]
            i64 u = t;
            int i = 0;
            while (!lb[i] || u >= (i64)out[i] * r) {
                if (lb[i]) u -= (i64)out[i] * r;
                i++;
            }
            int o = (int)(u / r), k = (int)(u % r);
            float s = 0.f;
            for (int row = 0; row < rows; row++) s += ldf(dy[i] + (i64)row * out[i] + o) * bf16_to_f32(xa[(i64)row * ldxa + off[i] + k]);
            gb[i][u] += scale * s;
        } else if (t < nb + nx) {  // dxa[row, j] = s·Σ_o dy[row, o]·B[o, k]
            i64 u = t - nb;
            int row = (int)(u / width), j = (int)(u % width);
            int i = 0;
            while (!lb[i] || j < off[i] || j >= off[i] + r) i++;
            int k = j - off[i];
            float s = 0.f;
            const T* d = dy[i] + (i64)row * out[i];
            for (int o = 0; o < out[i]; o++) s += ldf(d + o) * lb[i][(i64)o * r + k];
            dxa[u] = scale * s;
        } else {
            i64 u = t - nb - nx;
            int row = (int)(u / tot), col;
            int i = lora_member((int)(u % tot), out0, out1, &col);
            dy16[u] = f32_to_bf16(ldf(dy[i] + (i64)row * out[i] + col));
        }
    }
}

extern "C" __global__ void lora_grads_bf16(bf16* dy16, float* dxa, float* gb0, float* gb1, float* gb2, const bf16* dy0, const bf16* dy1,
                                           const bf16* dy2, const float* b0, const float* b1, const float* b2, int out0, int out1, int out2,
                                           int off0, int off1, int off2, const bf16* xa, int ldxa, int width, int rows, int r, float scale) {
    lora_grads_t(dy16, dxa, gb0, gb1, gb2, dy0, dy1, dy2, b0, b1, b2, out0, out1, out2, off0, off1, off2, xa, ldxa, width, rows, r, scale);
}

extern "C" __global__ void lora_grads_f32(bf16* dy16, float* dxa, float* gb0, float* gb1, float* gb2, const float* dy0, const float* dy1,
                                          const float* dy2, const float* b0, const float* b1, const float* b2, int out0, int out1, int out2,
                                          int off0, int off1, int off2, const bf16* xa, int ldxa, int width, int rows, int r, float scale) {
    lora_grads_t(dy16, dxa, gb0, gb1, gb2, dy0, dy1, dy2, b0, b1, b2, out0, out1, out2, off0, off1, off2, xa, ldxa, width, rows, r, scale);
}

// Thread jobs: [0, width·in) the adapters' dA[k, c] += Σ_rows dxa[row, off + k]·x[row, c]
// (ga_i null: no adapter at those columns), then rows·in of dx[row, c] += Σ_j dxa[row, j]·A(j)[c].
template <typename T>
__device__ void lora_in_t(float* ga0, float* ga1, float* ga2, T* dx, const float* dxa, const bf16* x, const float* a0, const float* a1,
                          const float* a2, int off0, int off1, int off2, int width, int rows, int in, int r) {
    float* ga[3] = {ga0, ga1, ga2};
    const float* la[3] = {a0, a1, a2};
    int off[3] = {off0, off1, off2};
    i64 na = (i64)width * in, nx = (i64)rows * in;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < na + nx; t += (i64)gridDim.x * blockDim.x) {
        if (t < na) {
            int j = (int)(t / in), c = (int)(t % in);
            int i = 0;
            while (!ga[i] || j < off[i] || j >= off[i] + r) i++;
            float s = 0.f;
            for (int row = 0; row < rows; row++) s += dxa[(i64)row * width + j] * bf16_to_f32(x[(i64)row * in + c]);
            ga[i][(i64)(j - off[i]) * in + c] += s;
        } else {
            i64 u = t - na;
            int row = (int)(u / in), c = (int)(u % in);
            float s = 0.f;
            for (int i = 0; i < 3; i++) {
                if (!la[i]) continue;
                const float* d = dxa + (i64)row * width + off[i];
                for (int k = 0; k < r; k++) s += d[k] * la[i][(i64)k * in + c];
            }
            stf(dx + u, ldf(dx + u) + s);
        }
    }
}

extern "C" __global__ void lora_in_bf16(float* ga0, float* ga1, float* ga2, bf16* dx, const float* dxa, const bf16* x, const float* a0,
                                        const float* a1, const float* a2, int off0, int off1, int off2, int width, int rows, int in, int r) {
    lora_in_t(ga0, ga1, ga2, dx, dxa, x, a0, a1, a2, off0, off1, off2, width, rows, in, r);
}

extern "C" __global__ void lora_in_f32(float* ga0, float* ga1, float* ga2, float* dx, const float* dxa, const bf16* x, const float* a0,
                                       const float* a1, const float* a2, int off0, int off1, int off2, int width, int rows, int in, int r) {
    lora_in_t(ga0, ga1, ga2, dx, dxa, x, a0, a1, a2, off0, off1, off2, width, rows, in, r);
}
