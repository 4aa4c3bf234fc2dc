// libcublas.so.12: cuBLAS' GEMMs, checked as the documentation says and queued on the
// handle's stream; the device process multiplies (gemm.cc). Column-major throughout, exactly
// as cuBLAS: C(i, j) is C[i + j·ldc].
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <set>
#include <string>

#include "proto.h"

#define API extern "C" __attribute__((visibility("default")))

using namespace cudasim;

// From the stand-in's libcuda.so.1.
extern "C" int cudasim_blas_context(void** ctx, int* retained);
extern "C" int cudasim_blas_release(void* ctx, int retained);
extern "C" int cudasim_blas_enqueue(void* ctx, void* stream, const void* cmd, size_t len);
extern "C" int cudasim_blas_valid_stream(void* ctx, void* stream);

namespace {

enum {
    ST_SUCCESS = 0,
    ST_NOT_INITIALIZED = 1,
    ST_ALLOC_FAILED = 3,
    ST_INVALID_VALUE = 7,
    ST_ARCH_MISMATCH = 8,
    ST_MAPPING_ERROR = 11,
    ST_EXECUTION_FAILED = 13,
    ST_INTERNAL_ERROR = 14,
    ST_NOT_SUPPORTED = 15,
    ST_LICENSE_ERROR = 16,
};

enum {
    COMPUTE_16F = 64,
    COMPUTE_16F_PEDANTIC = 65,
    COMPUTE_32F = 68,
    COMPUTE_32F_PEDANTIC = 69,
    COMPUTE_32F_FAST_16F = 74,
    COMPUTE_32F_FAST_16BF = 75,
    COMPUTE_32F_FAST_TF32 = 77,
};

constexpr int VERSION = 120804;  // 12.8.4

struct Handle {
    void* ctx;
    int retained;
    void* stream = nullptr;
    int math = 0;
    int pointer_mode = 0;
    int atomics = 0;
    void* workspace = nullptr;
    size_t workspace_size = 0;
};

std::mutex mu;
std::set<Handle*> handles;

bool valid(Handle* h) {
    std::lock_guard<std::mutex> l(mu);
    return handles.count(h) != 0;
}

bool op_ok(int op) { return op >= 0 && op <= 2; }  // N, T, C (C is T for real types)

// The GEMM: checks, then queues. a/b/c are device addresses; strides in elements.
int gemm(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int at, int64_t lda, int64_t sa,
         const void* b, int bt, int64_t ldb, int64_t sb, const void* beta, void* c, int ct, int64_t ldc, int64_t sc, int batch,
         int compute, int algo, const char* name) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return ST_INVALID_VALUE;
    if (lda < (ta ? (k > 1 ? k : 1) : (m > 1 ? m : 1))) return ST_INVALID_VALUE;
    if (ldb < (tb ? (n > 1 ? n : 1) : (k > 1 ? k : 1))) return ST_INVALID_VALUE;
    if (ldc < (m > 1 ? m : 1)) return ST_INVALID_VALUE;
    if (!alpha || !beta) return ST_INVALID_VALUE;
    if (!((algo >= -1 && algo <= 23) || (algo >= 99 && algo <= 115))) return ST_INVALID_VALUE;
    int round = 0;
    switch (compute) {
        case COMPUTE_32F:
        case COMPUTE_32F_PEDANTIC: {
            bool ok = (at == DT_F32 && bt == DT_F32 && ct == DT_F32) ||
                      ((at == DT_BF16 || at == DT_F16) && bt == at && (ct == at || ct == DT_F32));
            if (!ok) return ST_NOT_SUPPORTED;
            // TF32 tensor-op math rounds float inputs to TF32 (not in pedantic compute).
            if (compute == COMPUTE_32F && at == DT_F32 && (h->math & 0xf) == 3) round = DT_TF32;
            break;
        }
        case COMPUTE_32F_FAST_16F:
        case COMPUTE_32F_FAST_16BF:
        case COMPUTE_32F_FAST_TF32:
            if (!(at == DT_F32 && bt == DT_F32 && ct == DT_F32)) return ST_NOT_SUPPORTED;
            round = compute == COMPUTE_32F_FAST_16F ? DT_F16 : compute == COMPUTE_32F_FAST_16BF ? DT_BF16 : DT_TF32;
            break;
        case COMPUTE_16F:
        case COMPUTE_16F_PEDANTIC:
            return ST_NOT_SUPPORTED;  // half-precision accumulation is not emulated
        default:
            return ST_INVALID_VALUE;
    }
    if (m == 0 || n == 0 || batch == 0) return ST_SUCCESS;
    CmdGemm g;
    memset(&g, 0, sizeof g);
    g.h.type = CMD_GEMM;
    g.h.size = align16(sizeof g);
    g.transa = ta != 0;
    g.transb = tb != 0;
    g.m = m;
    g.n = n;
    g.k = k;
    g.batch = batch;
    g.lda = lda;
    g.ldb = ldb;
    g.ldc = ldc;
    g.stride_a = sa;
    g.stride_b = sb;
    g.stride_c = sc;
    g.a = (uint64_t)a;
    g.b = (uint64_t)b;
    g.c = (uint64_t)c;
    if (h->pointer_mode == 1) {
        g.alpha_ptr = (uint64_t)alpha;
        g.beta_ptr = (uint64_t)beta;
    } else {
        memcpy(&g.alpha, alpha, 4);
        memcpy(&g.beta, beta, 4);
    }
    g.atype = at;
    g.btype = bt;
    g.ctype = ct;
    g.round_inputs = round;
    snprintf(g.what, sizeof g.what, "%s(m=%d n=%d k=%d batch=%d)", name, m, n, k, batch);
    char buf[sizeof(CmdGemm) + 16] = {};
    memcpy(buf, &g, sizeof g);
    int r = cudasim_blas_enqueue(h->ctx, h->stream, buf, g.h.size);
    if (r == 900 || r == 901) return ST_NOT_SUPPORTED;  // a capture forbids it
    return r ? ST_EXECUTION_FAILED : ST_SUCCESS;
}

}  // namespace

API int cublasCreate_v2(Handle** out) {
    if (!out) return ST_INVALID_VALUE;
    void* ctx;
    int retained;
    if (cudasim_blas_context(&ctx, &retained) != 0) return ST_NOT_INITIALIZED;
    Handle* h = new Handle();
    h->ctx = ctx;
    h->retained = retained;
    std::lock_guard<std::mutex> l(mu);
    handles.insert(h);
    *out = h;
    return ST_SUCCESS;
}

API int cublasDestroy_v2(Handle* h) {
    {
        std::lock_guard<std::mutex> l(mu);
        if (!handles.erase(h)) return ST_NOT_INITIALIZED;
    }
    cudasim_blas_release(h->ctx, h->retained);
    delete h;
    return ST_SUCCESS;
}

API int cublasGetVersion_v2(Handle* h, int* v) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!v) return ST_INVALID_VALUE;
    *v = VERSION;
    return ST_SUCCESS;
}

API int cublasGetProperty(int type, int* v) {
    if (!v) return ST_INVALID_VALUE;
    switch (type) {
        case 0: *v = VERSION / 10000; return ST_SUCCESS;
        case 1: *v = VERSION / 100 % 100; return ST_SUCCESS;
        case 2: *v = VERSION % 100; return ST_SUCCESS;
    }
    return ST_INVALID_VALUE;
}

API int cublasSetStream_v2(Handle* h, void* stream) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!cudasim_blas_valid_stream(h->ctx, stream)) return ST_INVALID_VALUE;
    h->stream = stream;
    return ST_SUCCESS;
}

API int cublasGetStream_v2(Handle* h, void** stream) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!stream) return ST_INVALID_VALUE;
    *stream = h->stream;
    return ST_SUCCESS;
}

API int cublasSetMathMode(Handle* h, int mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    int base = mode & 0xf, flags = mode & ~0xf;
    if (base > 3 || (flags & ~16)) return ST_INVALID_VALUE;
    h->math = mode;
    return ST_SUCCESS;
}

API int cublasGetMathMode(Handle* h, int* mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!mode) return ST_INVALID_VALUE;
    *mode = h->math;
    return ST_SUCCESS;
}

API int cublasSetPointerMode_v2(Handle* h, int mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (mode != 0 && mode != 1) return ST_INVALID_VALUE;
    h->pointer_mode = mode;
    return ST_SUCCESS;
}

API int cublasGetPointerMode_v2(Handle* h, int* mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!mode) return ST_INVALID_VALUE;
    *mode = h->pointer_mode;
    return ST_SUCCESS;
}

API int cublasSetAtomicsMode(Handle* h, int mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (mode != 0 && mode != 1) return ST_INVALID_VALUE;
    h->atomics = mode;
    return ST_SUCCESS;
}

API int cublasGetAtomicsMode(Handle* h, int* mode) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (!mode) return ST_INVALID_VALUE;
    *mode = h->atomics;
    return ST_SUCCESS;
}

// The workspace must be 256-byte aligned.
API int cublasSetWorkspace_v2(Handle* h, void* ws, size_t size) {
    if (!valid(h)) return ST_NOT_INITIALIZED;
    if (size > 0 && (!ws || ((uintptr_t)ws & 255))) return ST_INVALID_VALUE;
    h->workspace = ws;
    h->workspace_size = size;
    return ST_SUCCESS;
}

API const char* cublasGetStatusName(int s) {
    switch (s) {
        case ST_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case ST_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case ST_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case ST_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case ST_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case ST_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case ST_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case ST_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case ST_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case ST_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

API const char* cublasGetStatusString(int s) {
    switch (s) {
        case ST_SUCCESS: return "success";
        case ST_NOT_INITIALIZED: return "the library was not initialized";
        case ST_ALLOC_FAILED: return "the resource allocation failed";
        case ST_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case ST_ARCH_MISMATCH: return "an absent device architectural feature is required";
        case ST_MAPPING_ERROR: return "an access to GPU memory space failed";
        case ST_EXECUTION_FAILED: return "the GPU program failed to execute";
        case ST_INTERNAL_ERROR: return "an internal operation failed";
        case ST_NOT_SUPPORTED: return "the functionality requested is not supported";
        case ST_LICENSE_ERROR: return "license error";
    }
    return "unknown error";
}

API int cublasGemmEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int at, int lda, const void* b,
                     int bt, int ldb, const void* beta, void* c, int ct, int ldc, int compute, int algo) {
    return gemm(h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0, 1, compute, algo, "cublasGemmEx");
}

API int cublasGemmStridedBatchedEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int at, int lda,
                                   long long sa, const void* b, int bt, int ldb, long long sb, const void* beta, void* c, int ct,
                                   int ldc, long long sc, int batch, int compute, int algo) {
    return gemm(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch, compute, algo,
                "cublasGemmStridedBatchedEx");
}

API int cublasSgemm_v2(Handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda, const float* b,
                       int ldb, const float* beta, float* c, int ldc) {
    return gemm(h, ta, tb, m, n, k, alpha, a, DT_F32, lda, 0, b, DT_F32, ldb, 0, beta, c, DT_F32, ldc, 0, 1, COMPUTE_32F, -1,
                "cublasSgemm");
}

API int cublasSgemmStridedBatched(Handle* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda,
                                  long long sa, const float* b, int ldb, long long sb, const float* beta, float* c, int ldc,
                                  long long sc, int batch) {
    return gemm(h, ta, tb, m, n, k, alpha, a, DT_F32, lda, sa, b, DT_F32, ldb, sb, beta, c, DT_F32, ldc, sc, batch, COMPUTE_32F, -1,
                "cublasSgemmStridedBatched");
}
