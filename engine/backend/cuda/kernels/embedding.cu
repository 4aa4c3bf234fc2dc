// out[r] = wte[ids[r]] (+ wpe[pos[r]]); grid (⌈dim/blockDim⌉, row groups).
extern "C" __global__ void embedding_forward(bf16* out, const int* ids, const int* pos, const bf16* wte, const bf16* wpe, int rows, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float v = bf16_to_f32(wte[(i64)ids[r] * dim + c]);
        if (wpe) v += bf16_to_f32(wpe[(i64)pos[r] * dim + c]);
        out[(i64)r * dim + c] = f32_to_bf16(v);
    }
}

// dwte[ids[r]] += dout[r], dwpe[pos[r]] += dout[r] (either may be null), float32 gradients
// by atomics: rows sharing an id add in no fixed order.
extern "C" __global__ void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int* ids, const int* pos, int rows, int dim) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float d = bf16_to_f32(dout[(i64)r * dim + c]);
        if (dwte) atomicAdd(&dwte[(i64)ids[r] * dim + c], d);
        if (dwpe) atomicAdd(&dwpe[(i64)pos[r] * dim + c], d);
    }
}
