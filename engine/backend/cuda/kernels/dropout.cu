// LoRA's dropout on the device: element i is kept when a counter-based hash of (seed, i)
// clears the drop probability, and scaled by 1/(1−p); the backward recomputes the same mask
// from the seed, so no mask is stored. (The CPU draws its masks from its own generator: the
// same distribution, not the same masks.)

__device__ __forceinline__ u32 dropout_bits(u64 seed, i64 i) {
    u64 z = seed + (u64)i * 0x9E3779B97F4A7C15ull;  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (u32)((z ^ (z >> 31)) >> 32);
}

// out = x·mask/(1−p), mask = hash(seed, i) ≥ threshold (threshold = p·2^32)
extern "C" __global__ void dropout_forward(bf16* out, const bf16* x, i64 n, u64 seed, u32 threshold, float scale) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = dropout_bits(seed, i) >= threshold ? f32_to_bf16(bf16_to_f32(x[i]) * scale) : (bf16)0;
}

// dx += dout·mask/(1−p) with the forward's mask
extern "C" __global__ void dropout_backward(bf16* dx, const bf16* dout, i64 n, u64 seed, u32 threshold, float scale) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        if (dropout_bits(seed, i) >= threshold) dx[i] = f32_to_bf16(bf16_to_f32(dx[i]) + bf16_to_f32(dout[i]) * scale);
}
