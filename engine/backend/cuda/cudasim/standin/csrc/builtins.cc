// libnvrtc-builtins.so.12.8: the stand-in's NVRTC, like NVIDIA's, refuses to compile unless
// this library can be loaded (preloaded by full path, or on the loader's search path).
#define API extern "C" __attribute__((visibility("default")))

API const char* cudasim_nvrtc_builtins() { return "cudasim"; }
