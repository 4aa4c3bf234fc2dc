// LoRA's dropout on the device: element i is kept when a counter-based hash of (seed, i)
// clears the drop probability, and scaled by 1/(1−p); the backward recomputes the same mask
// from the seed, so no mask is stored. The hash is backend.DropoutKeep's: the CPU drops the
// same elements.

__device__ __forceinline__ u32 dropout_bits(u64 seed, i64 i) {
    u64 z = seed + (u64)i * 0x9E3779B97F4A7C15ull;  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (u32)((z ^ (z >> 31)) >> 32);
}

// out = x·mask/(1−p), mask = hash(seed, i) ≥ threshold (threshold = p·2^32)
template <typename T>
__device__ void dropout_fwd(T* out, const T* x, i64 n, u64 seed, u32 threshold, float scale) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        stf(out + i, dropout_bits(seed, i) >= threshold ? ldf(x + i) * scale : 0.f);
}
extern "C" __global__ void dropout_forward(bf16* out, const bf16* x, i64 n, u64 seed, u32 threshold, float scale) {
    dropout_fwd(out, x, n, seed, threshold, scale);
}
extern "C" __global__ void dropout_forward_f32(float* out, const float* x, i64 n, u64 seed, u32 threshold, float scale) {
    dropout_fwd(out, x, n, seed, threshold, scale);
}

// dx += dout·mask/(1−p) with the forward's mask
template <typename T>
__device__ void dropout_bwd(T* dx, const T* dout, i64 n, u64 seed, u32 threshold, float scale) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        if (dropout_bits(seed, i) >= threshold) stf(dx + i, ldf(dx + i) + ldf(dout + i) * scale);
}
extern "C" __global__ void dropout_backward(bf16* dx, const bf16* dout, i64 n, u64 seed, u32 threshold, float scale) {
    dropout_bwd(dx, dout, n, seed, threshold, scale);
}
extern "C" __global__ void dropout_backward_f32(float* dx, const float* dout, i64 n, u64 seed, u32 threshold, float scale) {
    dropout_bwd(dx, dout, n, seed, threshold, scale);
}
