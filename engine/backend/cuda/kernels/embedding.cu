// out[r] = wte[ids[r]] (+ wpe[pos[r]]) into the residual stream (float32, or bf16), from
// bf16 tables or float32 ones (_f32tab); grid (⌈dim/blockDim⌉, row groups).
template <typename T, typename W>
__device__ void embedding_fwd(T* out, const int* ids, const int* pos, const W* wte, const W* wpe, int rows, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float v = ldf(wte + (i64)ids[r] * dim + c);
        if (wpe) v += ldf(wpe + (i64)pos[r] * dim + c);
        stf(out + (i64)r * dim + c, v);
    }
}
extern "C" __global__ void embedding_forward(float* out, const int* ids, const int* pos, const bf16* wte, const bf16* wpe, int rows, int dim) {
    embedding_fwd(out, ids, pos, wte, wpe, rows, dim);
}
extern "C" __global__ void embedding_forward_bf16(bf16* out, const int* ids, const int* pos, const bf16* wte, const bf16* wpe, int rows, int dim) {
    embedding_fwd(out, ids, pos, wte, wpe, rows, dim);
}
extern "C" __global__ void embedding_forward_f32tab(float* out, const int* ids, const int* pos, const float* wte, const float* wpe, int rows, int dim) {
    embedding_fwd(out, ids, pos, wte, wpe, rows, dim);
}
extern "C" __global__ void embedding_forward_bf16_f32tab(bf16* out, const int* ids, const int* pos, const float* wte, const float* wpe, int rows, int dim) {
    embedding_fwd(out, ids, pos, wte, wpe, rows, dim);
}

// dwte[ids[r]] += dout[r], dwpe[pos[r]] += dout[r] (either may be null), float32 gradients
// by atomics: rows sharing an id add in no fixed order.
extern "C" __global__ void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* ids, const int* pos, int rows, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float d = dout[(i64)r * dim + c];
        if (dwte) atomicAdd(&dwte[(i64)ids[r] * dim + c], d);
        if (dwpe) atomicAdd(&dwpe[(i64)pos[r] * dim + c], d);
    }
}
