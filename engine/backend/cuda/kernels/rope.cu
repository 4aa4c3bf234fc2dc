// Rotary position embeddings, rotate-half layout: for each head, the pair (a, b) =
// (x[i], x[i+half]) at position p becomes (a·cos − b·sin, b·cos + a·sin), with the angle
// p·invFreq[i] tabulated on the host in float64 (cos and sin tables [maxPos, half]).
// sign −1 rotates back: the backward, the rotation being orthogonal. In place.
// Heads are hd values apart in a row; dimensions [2·half, hd) pass through (partial rotary).
// Grid (rows, heads), block half threads (rounded up to a warp). bf16 or float32 (_f32) x.
template <typename T>
__device__ void rope(T* x, const int* pos, const float* cos_t, const float* sin_t, int rows, int heads, int half, int hd, float sign) {
    int i = threadIdx.x;
    if (i >= half) return;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 p = pos[r];
        float c = cos_t[p * half + i], s = sign * sin_t[p * half + i];
        for (int h = blockIdx.y; h < heads; h += gridDim.y) {
            T* v = x + ((i64)r * heads + h) * hd;
            float a = ldf(v + i), b = ldf(v + i + half);
            stf(v + i, a * c - b * s);
            stf(v + i + half, b * c + a * s);
        }
    }
}
extern "C" __global__ void __launch_bounds__(1024) rope_forward(bf16* x, const int* pos, const float* cos_t, const float* sin_t, int rows, int heads, int half, int hd,
                                                                 float sign) {
    rope(x, pos, cos_t, sin_t, rows, heads, half, hd, sign);
}
extern "C" __global__ void __launch_bounds__(1024) rope_forward_f32(float* x, const int* pos, const float* cos_t, const float* sin_t, int rows, int heads, int half,
                                                                     int hd, float sign) {
    rope(x, pos, cos_t, sin_t, rows, heads, half, hd, sign);
}
