// Sampling on the device, one block per row of float32 logits: temperature, then top-k,
// then top-p over the top-k renormalised (Hugging Face's order), then a draw with the
// uniform the host gives (from the row's own seeded generator, as on the CPU). The chosen
// token's log-probability is under softmax(logits/T) over the whole vocabulary (T = 1 when
// greedy).
//
// The kept set is {key > K} ∪ {the first `quota` ids with key = K}, K found by radix
// selection over order-preserving 32-bit keys of the logits: by count for top-k (ties at
// the boundary keep the lowest ids, as the CPU's sort does), by probability mass for top-p.
// Masses are integers, e^{z−max}·2^40 rounded, so that every sum is exact and the same
// whatever order the threads add in: the same seed gives the same tokens.
//
// transformers' two other processors, in its order: the repetition penalty on the raw
// logits of the tokens a row has seen (seen: a bit per token, rows × words; the drawn token's
// bit is set, so that a captured decode step keeps it current), applied wherever a logit is
// read; min_p after top-p, a threshold z ≥ z_max + log(min_p) on the kept set. The log-prob
// stays that of softmax(raw logits·inv_temp).

#define MASS_SCALE 1099511627776.0f  // 2^40

__device__ __forceinline__ u32 order_key(float x) {
    u32 b = __float_as_uint(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(u32 k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

__device__ __forceinline__ u64 mass_of(float x, float xmax, float inv_temp) {
    return (u64)(expf((x - xmax) * inv_temp) * MASS_SCALE + 0.5f);
}

__device__ __forceinline__ u64 shfl_up_u64(u64 v, int d) {
    u32 lo = __shfl_up_sync(FULL_MASK, (u32)v, d), hi = __shfl_up_sync(FULL_MASK, (u32)(v >> 32), d);
    return ((u64)hi << 32) | lo;
}

__device__ __forceinline__ u64 shfl_idx_u64(u64 v, int src) {
    u32 lo = __shfl_sync(FULL_MASK, (u32)v, src), hi = __shfl_sync(FULL_MASK, (u32)(v >> 32), src);
    return ((u64)hi << 32) | lo;
}

// block_scan_u64 returns the exclusive prefix sum of v over the block's threads and sets
// *total; sh holds 33 u64.
__device__ u64 block_scan_u64(u64 v, u64* sh, u64* total) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u64 inc = v;
    for (int d = 1; d < 32; d <<= 1) {
        u64 o = shfl_up_u64(inc, d);
        if (lane >= d) inc += o;
    }
    __syncthreads();
    if (lane == 31) sh[w] = inc;
    __syncthreads();
    if (w == 0) {
        u64 s = lane < nw ? sh[lane] : 0;
        u64 si = s;
        for (int d = 1; d < 32; d <<= 1) {
            u64 o = shfl_up_u64(si, d);
            if (lane >= d) si += o;
        }
        if (lane < nw) sh[lane] = si - s;  // exclusive prefix of each warp
        if (lane == 31) sh[32] = si;
    }
    __syncthreads();
    *total = sh[32];
    return sh[w] + inc - v;
}

// radix_digit: histograms (count and mass) of the keys matching prefix under mask, by the
// 8 bits at shift, then the digit where the running total from the top first reaches
// *need (count when by_mass is 0, else mass). *need becomes what remains inside that digit.
// RADIX_SUBS copies of each histogram, a warp adding to copy warp % RADIX_SUBS: in the
// first passes most keys share a digit (logits share their top bits), and one shared
// counter for the whole block would serialise every thread's atomic.
#define RADIX_SUBS 8
struct radix_hist { u32 cnt[RADIX_SUBS][256]; u32 mlo[RADIX_SUBS][256]; u32 mhi[RADIX_SUBS][256]; };

__device__ void radix_clear(radix_hist* h) {
    for (int i = threadIdx.x; i < RADIX_SUBS * 256; i += blockDim.x) {
        (&h->cnt[0][0])[i] = 0;
        (&h->mlo[0][0])[i] = 0;
        (&h->mhi[0][0])[i] = 0;
    }
}

__device__ __forceinline__ void radix_count(radix_hist* h, int d) { atomicAdd(&h->cnt[(threadIdx.x >> 5) % RADIX_SUBS][d], 1u); }

__device__ __forceinline__ void radix_add(radix_hist* h, int d, u32 c, u64 m) {
    int sub = (threadIdx.x >> 5) % RADIX_SUBS;
    atomicAdd(&h->cnt[sub][d], c);
    u32 lo = (u32)m, old = atomicAdd(&h->mlo[sub][d], lo);
    u32 carry = (old + lo < old) ? 1u : 0u;
    atomicAdd(&h->mhi[sub][d], (u32)(m >> 32) + carry);
}

__device__ __forceinline__ u32 radix_cnt(const radix_hist* h, int d) {
    u32 c = 0;
    for (int s = 0; s < RADIX_SUBS; s++) c += h->cnt[s][d];
    return c;
}

__device__ __forceinline__ u64 radix_mass(const radix_hist* h, int d) {
    u64 m = 0;
    for (int s = 0; s < RADIX_SUBS; s++) m += ((u64)h->mhi[s][d] << 32) | h->mlo[s][d];
    return m;
}

// pick_digit scans digits 255..0 (warp 0) for the one where the running total reaches need.
// Results in *digit, *need (remaining within the digit), *avail (count of that digit).
__device__ void pick_digit(radix_hist* h, int by_mass, u64* need, int* digit, u32* avail) {
    if (threadIdx.x < 32) {
        int lane = threadIdx.x;
        u64 v[8];
        u64 s = 0;
        for (int i = 0; i < 8; i++) {
            int d = 255 - (lane * 8 + i);
            v[i] = by_mass ? radix_mass(h, d) : radix_cnt(h, d);
            s += v[i];
        }
        u64 inc = s;
        for (int d = 1; d < 32; d <<= 1) {
            u64 o = shfl_up_u64(inc, d);
            if (lane >= d) inc += o;
        }
        u64 before = inc - s, n = *need;
        __syncwarp();
        // the lane whose range holds the crossing, or the last lane with something when the
        // need exceeds the total (rounding): it takes its lowest non-empty digit
        u32 found = __ballot_sync(FULL_MASK, before < n && n <= inc && s > 0);
        u32 nonempty = __ballot_sync(FULL_MASK, s > 0);
        int src = 0;
        if (found) {
            while (!((found >> src) & 1u)) src++;  // the first lane where the total reaches the need
        } else {
            for (int i = 0; i < 32; i++)  // rounding left the need above the total: the lowest digits
                if ((nonempty >> i) & 1u) src = i;
        }
        if (lane == src) {
            u64 run = before, rem = 1;
            int pick = 255 - lane * 8;
            for (int i = 0; i < 8; i++) {
                if (v[i] == 0) continue;
                int d = 255 - (lane * 8 + i);
                if (!found) {
                    pick = d;
                    rem = v[i];
                } else if (n <= run + v[i]) {
                    pick = d;
                    rem = n - run;
                    break;
                } else {
                    run += v[i];
                }
            }
            *digit = pick;
            *need = rem;
            *avail = radix_cnt(h, pick);
        }
    }
    __syncthreads();
}

// penalised is row[j] under the repetition penalty when seen marks j (seen null: none).
__device__ __forceinline__ float penalised(const float* row, const int* seen, int j, float pen) {
    float v = row[j];
    if (seen && ((seen[j >> 5] >> (j & 31)) & 1)) v = v < 0.f ? v * pen : v / pen;
    return v;
}

// sample_done records row r's token t: its log-prob (lp, or, when the penalty changed the
// row, that of the raw row, whose log-sum-exp is formed here, after the draw, so that it
// holds no registers through it) and its bit in seen. Every thread calls it.
__device__ __noinline__ void sample_done(int* tokens, float* logp, const float* x, int* seen, const int* prow, int r, int words, int vocab, float it, int t,
                                         float lp, float* shf) {
    if (prow) {
        float m = NEG_INF;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, x[j]);
        m = block_max(m, shf);
        float sr = 0.f;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x) sr += __expf((x[j] - m) * it);
        float lse = logf(block_sum(sr, shf));
        lp = (x[t] - m) * it - lse;
    }
    if (threadIdx.x == 0) {
        tokens[r] = t;
        logp[r] = lp;
        if (seen) seen[(i64)r * words + (t >> 5)] |= 1 << (t & 31);
    }
    __syncthreads();
}

// draw_tile walks ids [j0, j1) in order with one warp, 32 at a time: an id is kept when its
// key is above K, or equal to K with fewer than quota ties before it (ties: those before j0);
// min-p's threshold thr applies to the kept. It adds the kept mass to *mass; with found set,
// it stops at the id where the uniform u falls (base: the kept mass before j0) and stores it.
#define DRAW_TILES 64
__device__ void draw_tile(const float* x, const int* prow, float penalty, int j0, int j1, u32 K, u32 quota, float thr, float mx, float it,
                          u64 ties, u64 base, u64 u, u64* mass, int* found) {
    int lane = threadIdx.x & 31;
    u64 total = 0;
    for (int c = j0; c < j1; c += 32) {
        int j = c + lane;
        bool ok = j < j1;
        float v = ok ? penalised(x, prow, j, penalty) : 0.f;
        u32 k = order_key(v);
        bool tie = ok && k == K;
        u32 bal = __ballot_sync(FULL_MASK, tie);
        u64 rank = ties + __popc(bal & ((1u << lane) - 1u));
        bool in = ok && (k > K || (tie && rank < quota)) && v >= thr;
        u64 mm = in ? mass_of(v, mx, it) : 0;
        ties += __popc(bal);
        u64 inc = mm;  // inclusive scan of the chunk's masses over the lanes
        for (int d = 1; d < 32; d <<= 1) {
            u64 o = shfl_up_u64(inc, d);
            if (lane >= d) inc += o;
        }
        u64 chunk = shfl_idx_u64(inc, 31);
        if (found) {
            u64 before = base + total + inc - mm;
            u32 hit = __ballot_sync(FULL_MASK, mm > 0 && u >= before && u < before + mm);
            if (hit) {
                if (lane == __ffs(hit) - 1) *found = j;
                break;
            }
        }
        total += chunk;
    }
    *mass += total;
}

extern "C" __global__ void __launch_bounds__(1024) sample_rows(int* tokens, float* logp, const float* logits, const double* uniforms, int rows, int vocab,
                                       float inv_temp, int greedy, int top_k, float top_p, float min_p, float penalty, int* seen, int words) {
    __shared__ radix_hist h;
    __shared__ u64 sh64[33];
    __shared__ float shf[32];
    __shared__ int shi[32];
    __shared__ u64 s_need;
    __shared__ int s_digit;
    __shared__ u32 s_avail;
    __shared__ int s_token;
    __shared__ u64 s_tties[DRAW_TILES], s_tmass[DRAW_TILES], s_base;
    __shared__ int s_tile;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* x = logits + (i64)r * vocab;
        float it = greedy ? 1.f : inv_temp;
        const int* prow = (seen && penalty > 0.f && penalty != 1.f) ? seen + (i64)r * words : (const int*)0;  // the penalty's marks
#define XV(j) penalised(x, prow, (j), penalty)
        // maximum (lowest id among equals) and the log-sum-exp
        float mx = NEG_INF;
        int arg = 0x7fffffff;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x)
            if (XV(j) > mx) { mx = XV(j); arg = j; }
        for (int o = 16; o > 0; o >>= 1) {
            float om = __shfl_xor_sync(FULL_MASK, mx, o);
            int oa = __shfl_xor_sync(FULL_MASK, arg, o);
            if (om > mx || (om == mx && oa < arg)) { mx = om; arg = oa; }
        }
        int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
        __syncthreads();
        if (lane == 0) { shf[w] = mx; shi[w] = arg; }
        __syncthreads();
        mx = lane < nw ? shf[lane] : NEG_INF;
        arg = lane < nw ? shi[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float om = __shfl_xor_sync(FULL_MASK, mx, o);
            int oa = __shfl_xor_sync(FULL_MASK, arg, o);
            if (om > mx || (om == mx && oa < arg)) { mx = om; arg = oa; }
        }
        float s = 0.f;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += __expf((XV(j) - mx) * it);
        float lse = logf(block_sum(s, shf));  // relative to mx·it
        if (greedy) {
            if (threadIdx.x == 0) s_token = arg;
            __syncthreads();
            sample_done(tokens, logp, x, seen, prow, r, words, vocab, it, s_token, (x[arg] - mx) * it - lse, shf);
            continue;
        }
        // top-k by count: K_k and how many of its ties are kept
        u32 K = 0;      // keep every key above K (0: all; only a NaN with every bit set maps to 0)
        u32 quota = 0;  // and this many of the ties at K
        if (top_k > 0 && top_k < vocab) {
            u64 need = (u64)top_k;
            u32 prefix = 0, pmask = 0;
            for (int shift = 24; shift >= 0; shift -= 8) {
                radix_clear(&h);
                __syncthreads();
                for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
                    u32 k = order_key(XV(j));
                    if ((k & pmask) == prefix) radix_count(&h, (k >> shift) & 255);
                }
                __syncthreads();
                if (threadIdx.x == 0) s_need = need;
                __syncthreads();
                pick_digit(&h, 0, &s_need, &s_digit, &s_avail);
                need = s_need;
                prefix |= (u32)s_digit << shift;
                pmask |= 255u << shift;
                __syncthreads();
            }
            K = prefix;
            quota = (u32)need;
        }
        // top-p by mass among those, when asked
        if (top_p > 0.f && top_p < 1.f) {
            u64 tot = 0, part = 0;
            u64 wk = mass_of(key_value(K), mx, it);
            for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
                float v = XV(j);
                u32 k = order_key(v);
                if (k > K) part += mass_of(v, mx, it);
            }
            block_scan_u64(part, sh64, &tot);
            tot += (u64)quota * wk;
            u64 need = (u64)((double)top_p * (double)tot + 0.5);
            if (need < 1) need = 1;
            if (need > tot) need = tot;
            u32 prefix = 0, pmask = 0;
            for (int shift = 24; shift >= 0; shift -= 8) {
                radix_clear(&h);
                __syncthreads();
                for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
                    float v = XV(j);
                    u32 k = order_key(v);
                    if (k > K && (k & pmask) == prefix) radix_add(&h, (k >> shift) & 255, 1u, mass_of(v, mx, it));
                }
                if (threadIdx.x == 0 && (K & pmask) == prefix && quota > 0) radix_add(&h, (K >> shift) & 255, quota, (u64)quota * wk);
                __syncthreads();
                if (threadIdx.x == 0) s_need = need;
                __syncthreads();
                pick_digit(&h, 1, &s_need, &s_digit, &s_avail);
                need = s_need;
                prefix |= (u32)s_digit << shift;
                pmask |= 255u << shift;
                __syncthreads();
            }
            u64 wp = mass_of(key_value(prefix), mx, it);
            u32 avail = s_avail;
            u32 c = wp > 0 ? (u32)((need + wp - 1) / wp) : avail;
            if (c < 1) c = 1;
            if (c > avail) c = avail;
            K = prefix;
            quota = c;
        }
        // min-p: the kept tokens must also reach z_max + log(min_p) (−inf when off)
        float thr = min_p > 0.f ? mx + logf(min_p) / it : NEG_INF;
        // the draw: the kept mass, then a scan in id order to where the uniform falls
        u64 kept = 0, part = 0;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
            float v = XV(j);
            if (order_key(v) > K && v >= thr) part += mass_of(v, mx, it);
        }
        block_scan_u64(part, sh64, &kept);
        if (key_value(K) >= thr) kept += (u64)quota * mass_of(key_value(K), mx, it);
        u64 u = (u64)(uniforms[r] * (double)kept);
        if (u >= kept) u = kept - 1;
        // Where u falls, in id order, over tiles of the vocabulary that the warps take in turn
        // (a scan of the whole row tile by tile, each step a block-wide scan, took 0.2 ms a
        // token on an H200 for 151,936 ids): each tile's ties at K; then, the ties before it
        // known, its kept mass; then the tile holding u, searched by one warp. The masses are
        // integers, so this finds the token the id-ordered scan finds.
        int L = ((vocab + DRAW_TILES - 1) / DRAW_TILES + 31) & ~31;
        int ntiles = (vocab + L - 1) / L;
        for (int t = w; t < ntiles; t += nw) {
            u32 c = 0;
            for (int j = t * L + lane; j < min(vocab, (t + 1) * L); j += 32) c += order_key(XV(j)) == K;
            for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(FULL_MASK, c, o);
            if (lane == 0) s_tties[t] = c;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 run = 0;
            for (int t = 0; t < ntiles; t++) {
                u64 c = s_tties[t];
                s_tties[t] = run;
                run += c;
            }
        }
        __syncthreads();
        for (int t = w; t < ntiles; t += nw) {
            u64 m = 0;
            draw_tile(x, prow, penalty, t * L, min(vocab, (t + 1) * L), K, quota, thr, mx, it, s_tties[t], 0, ~0ull, &m, 0);
            if (lane == 0) s_tmass[t] = m;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            s_token = -1;
            s_tile = -1;
            u64 run = 0;
            for (int t = 0; t < ntiles; t++) {
                if (u < run + s_tmass[t]) {
                    s_tile = t;
                    s_base = run;
                    break;
                }
                run += s_tmass[t];
            }
        }
        __syncthreads();
        if (w == 0 && s_tile >= 0) {
            int t = s_tile;
            u64 m = 0;
            draw_tile(x, prow, penalty, t * L, min(vocab, (t + 1) * L), K, quota, thr, mx, it, s_tties[t], s_base, u, &m, &s_token);
        }
        __syncthreads();
        if (threadIdx.x == 0 && s_token < 0) s_token = arg;
        __syncthreads();
        int t = s_token;
        sample_done(tokens, logp, x, seen, prow, r, words, vocab, it, t, (XV(t) - mx) * it - lse, shf);
#undef XV
    }
}

// The draw over many blocks a row, for temperature sampling without top-k, top-p or the
// repetition penalty (a GRPO rollout's) and greedy decoding: sample_rows' one block a row
// took 0.2 ms a token on an H200 for 151,936 ids. Two launches over (tiles, rows): the first
// finds each tile's maximum (lowest id among equals) and Σ e^{(x − max)·it} relative to it;
// the second forms the row's maximum from the tiles' (every block the same), each tile's kept
// mass (min_p's threshold applied), and the row's last block to finish (a counter the first
// launch zeroes) finds the tile where the uniform falls and searches it with draw_tile. The
// masses are the integers sample_rows adds, so the draw is the token it draws.

// block_argmax returns the block's largest mx (lowest arg among equals) to every thread.
__device__ void block_argmax(float* mx, int* arg, float* shf, int* shi) {
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(FULL_MASK, *mx, o);
        int oa = __shfl_xor_sync(FULL_MASK, *arg, o);
        if (om > *mx || (om == *mx && oa < *arg)) { *mx = om; *arg = oa; }
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) { shf[w] = *mx; shi[w] = *arg; }
    __syncthreads();
    *mx = lane < nw ? shf[lane] : NEG_INF;
    *arg = lane < nw ? shi[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(FULL_MASK, *mx, o);
        int oa = __shfl_xor_sync(FULL_MASK, *arg, o);
        if (om > *mx || (om == *mx && oa < *arg)) { *mx = om; *arg = oa; }
    }
}

// Tile t of row r is ids [t·tile, (t+1)·tile); its results sit at r·gridDim.x + t.
extern "C" __global__ void sample_tiles(float* tmax, int* targ, float* tsum, u32* count, const float* logits, int vocab, int tile, float it) {
    __shared__ float shf[32];
    __shared__ int shi[32];
    int t = blockIdx.x, r = blockIdx.y;
    const float* x = logits + (i64)r * vocab;
    int j0 = t * tile, j1 = min(vocab, j0 + tile);
    float mx = NEG_INF;
    int arg = 0x7fffffff;
    for (int j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        if (x[j] > mx) { mx = x[j]; arg = j; }
    block_argmax(&mx, &arg, shf, shi);
    float s = 0.f;
    if (mx != NEG_INF)
        for (int j = j0 + threadIdx.x; j < j1; j += blockDim.x) s += __expf((x[j] - mx) * it);
    s = block_sum(s, shf);
    if (threadIdx.x == 0) {
        i64 o = (i64)r * gridDim.x + t;
        tmax[o] = mx;
        targ[o] = arg;
        tsum[o] = s;
        if (t == 0) count[r] = 0;
    }
}

extern "C" __global__ void sample_tiles_draw(int* tokens, float* logp, u64* tmass, u32* count, const float* tmax, const int* targ,
                                             const float* tsum, const float* logits, const double* uniforms, int vocab, int tile, float it,
                                             int greedy, float min_p, int* seen, int words) {
    __shared__ u64 sh64[33];
    __shared__ int s_last, s_tile, s_token;
    __shared__ u64 s_base, s_u;
    int t = blockIdx.x, r = blockIdx.y, T = gridDim.x;
    const float* x = logits + (i64)r * vocab;
    i64 row0 = (i64)r * T;
    float mx = NEG_INF;
    int arg = 0x7fffffff;
    for (int i = 0; i < T; i++) {
        float m = tmax[row0 + i];
        int a = targ[row0 + i];
        if (m > mx || (m == mx && a < arg)) { mx = m; arg = a; }
    }
    if (arg == 0x7fffffff) arg = 0;  // a row with no number (NaN or −inf throughout)
    float thr = min_p > 0.f ? mx + logf(min_p) / it : NEG_INF;
    if (!greedy) {
        u64 part = 0, tot = 0;
        for (int j = t * tile + threadIdx.x; j < min(vocab, (t + 1) * tile); j += blockDim.x) {
            float v = x[j];
            if (order_key(v) > 0u && v >= thr) part += mass_of(v, mx, it);
        }
        block_scan_u64(part, sh64, &tot);
        if (threadIdx.x == 0) {
            tmass[row0 + t] = tot;
            __threadfence();
            s_last = atomicAdd(&count[r], 1u) == (u32)(T - 1);
        }
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        if (threadIdx.x == 0) {
            const volatile u64* tm = tmass + row0;
            u64 kept = 0;
            for (int i = 0; i < T; i++) kept += tm[i];
            u64 u = (u64)(uniforms[r] * (double)kept);
            if (u >= kept) u = kept - 1;
            s_tile = -1;
            s_token = -1;
            s_u = u;
            u64 run = 0;
            for (int i = 0; i < T; i++) {
                if (u < run + tm[i]) {
                    s_tile = i;
                    s_base = run;
                    break;
                }
                run += tm[i];
            }
        }
        __syncthreads();
        if (threadIdx.x < 32 && s_tile >= 0) {
            u64 m = 0;
            draw_tile(x, (const int*)0, 1.f, s_tile * tile, min(vocab, (s_tile + 1) * tile), 0u, 0u, thr, mx, it, 0, s_base, s_u, &m, &s_token);
        }
        __syncthreads();
    } else if (t != 0) {
        return;
    }
    if (threadIdx.x == 0) {
        int tok = greedy || s_token < 0 ? arg : s_token;
        float s = 0.f;
        for (int i = 0; i < T; i++)
            if (tmax[row0 + i] != NEG_INF) s += tsum[row0 + i] * __expf((tmax[row0 + i] - mx) * it);
        tokens[r] = tok;
        logp[r] = (x[tok] - mx) * it - logf(s);
        if (seen) seen[(i64)r * words + (tok >> 5)] |= 1 << (tok & 31);
    }
}
