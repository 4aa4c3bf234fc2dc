// libcublasLt.so.12: present because the real libcublas needs it beside it (loaders
// preload it); the stand-in's cuBLAS does not use it.
#include <stddef.h>

#define API extern "C" __attribute__((visibility("default")))

API size_t cublasLtGetVersion() { return 120804; }
API int cublasLtCreate(void** h) {
    if (!h) return 7;  // CUBLAS_STATUS_INVALID_VALUE
    static int handle;
    *h = &handle;
    return 0;
}
API int cublasLtDestroy(void*) { return 0; }
