// The protocol between libcuda.so.1 (in the user's process) and cudasim-device (the process
// that owns the device memory and runs the work). The user's process serialises stream work
// into the shared command buffer at a synchronisation point and waits for the device process
// to run it; nothing else crosses. Device memory is one memfd: the device process maps it at
// the device addresses (DEVBASE + offset) handed to the user, the user's process maps it
// elsewhere (its alias) and never at the device addresses, which it keeps reserved PROT_NONE.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

namespace cudasim {

constexpr uint32_t PROTO_MAGIC = 0x43534d31;  // "CSM1"
constexpr uint32_t PROTO_VERSION = 3;

constexpr uint64_t PAGE = 4096;
constexpr uint64_t DEV_SPACE = 1ull << 40;             // device address space of a process (1 TiB)
constexpr uint64_t STAGING_SIZE = 256ull << 20;        // staging ring for pageable copies and module images
constexpr uint64_t CMD_CAPACITY = 64ull << 20;         // one batch of commands
constexpr uint32_t MAX_EVENTS = 1 << 16;               // event timestamp slots
constexpr size_t DETAIL_SIZE = 8192;

// The control block at the start of the control memfd.
struct Control {
    uint32_t magic, version;
    uint32_t req;     // bumped by the user's process to submit a batch (futex)
    uint32_t ack;     // set to req by the device process when the batch is done (futex)
    int32_t status;   // CUresult of the batch's first failure, 0 when it all ran
    uint32_t fatal;   // the failure leaves the context unusable (a kernel fault, not a bad module image)
    uint32_t ready;   // the device process is up (futex)
    uint32_t pad0;
    int32_t pid;      // the device process
    uint32_t workers;
    uint64_t cmd_bytes;
    uint64_t event_ns[MAX_EVENTS];  // CLOCK_MONOTONIC at each event record
    char detail[DETAIL_SIZE];       // what failed, in words
    alignas(64) uint8_t cmd[1];     // CMD_CAPACITY bytes
};

inline size_t control_size() { return (offsetof(Control, cmd) + CMD_CAPACITY + PAGE - 1) / PAGE * PAGE; }

// Commands: a header, then the command's own fields, each command 16-byte aligned.
enum CmdType : uint32_t {
    CMD_MAP = 1,       // make [addr, addr+len) readable and writable: a new allocation
    CMD_UNMAP,         // make it inaccessible: freed
    CMD_LAUNCH,        // run a kernel
    CMD_COPY,          // memmove within the device process' view
    CMD_MEMSET,        // fill with a 1-, 2- or 4-byte value
    CMD_EVENT,         // record the time into an event slot
    CMD_MODULE_LOAD,   // load a module image from device-visible memory
    CMD_MODULE_UNLOAD,
    CMD_GEMM,          // cuBLAS GEMM (strided batched)
};

struct CmdHeader {
    uint32_t type;
    uint32_t size;  // bytes of this command, header included, a multiple of 16
};

struct CmdMap {
    CmdHeader h;
    uint64_t addr, len;       // pages
    uint64_t data, data_len;  // the allocation inside them (for messages and end-of-buffer checks)
    uint32_t kind;            // 0 device memory, 1 pinned host memory, 2 staging
    uint32_t pad;
};

struct CmdLaunch {
    CmdHeader h;
    uint32_t module, kernel;
    uint32_t grid[3], block[3];
    uint32_t shared, flags;  // flags: LAUNCH_FTZ
    uint32_t param_bytes, pad;
    // then param_bytes of parameters, laid out as the kernel's metadata says
};
constexpr uint32_t LAUNCH_FTZ = 1;

struct CmdCopy {
    CmdHeader h;
    uint64_t dst, src, len;
    uint64_t pad;
};

struct CmdMemset {
    CmdHeader h;
    uint64_t dst, count;
    uint32_t value, elem;  // elem: 1, 2 or 4 bytes
};

struct CmdEvent {
    CmdHeader h;
    uint32_t slot, pad;
};

struct CmdModule {
    CmdHeader h;
    uint32_t module, pad;
    uint64_t image, len;  // device-process address of the image (in the staging ring)
};

// C[i + j·ldc] (+ k·strideC) = alpha·Σ op(A)(i,p)·op(B)(p,j) + beta·C, column-major, as cuBLAS.
struct CmdGemm {
    CmdHeader h;
    int32_t transa, transb;
    int32_t m, n, k, batch;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    uint64_t a, b, c;
    uint64_t alpha_ptr, beta_ptr;  // device addresses when pointer mode is device, else 0
    float alpha, beta;
    int32_t atype, btype, ctype;
    int32_t round_inputs;  // 0, or the type the inputs are rounded to first (TF32 or 16-bit fast modes)
    char what[64];         // the call, for messages
};

// Types (library_types.h).
enum { DT_F32 = 0, DT_F16 = 2, DT_BF16 = 14, DT_TF32 = 100 };

inline uint32_t align16(uint32_t n) { return (n + 15) & ~15u; }

// ---- module images ----
// A compiled program ("CUBIN" to its user): a small header, the kernels' metadata as text,
// then the shared object. PTX from the stand-in's NVRTC carries the same image in base64.

constexpr char IMAGE_MAGIC[8] = {'C', 'U', 'D', 'A', 'S', 'I', 'M', 0};
constexpr uint32_t IMAGE_VERSION = 2;

struct ImageHeader {
    char magic[8];
    uint32_t version;
    uint32_t kernel_abi;
    uint32_t arch;      // sm_XY as 10·X + Y
    uint32_t flags;     // IMAGE_PTX: compiled for compute_XY (any device of that capability or newer)
    uint64_t meta_len;  // bytes of metadata text
    uint64_t so_len;    // bytes of the shared object
    uint64_t compile_flags;  // LAUNCH_FTZ when compiled with --ftz=true / --use_fast_math
};
constexpr uint32_t IMAGE_PTX = 1;
constexpr uint32_t IMAGE_ARCH_SPECIFIC = 2;  // sm_90a: runs on 9.0 only

struct KernelMeta {
    std::string name;
    uint32_t max_threads = 0, min_blocks = 0;  // __launch_bounds__, 0 when absent
    std::vector<uint32_t> size, align, offset;
    uint32_t param_bytes = 0;
};

// Metadata text: one line per kernel: "name max_threads min_blocks nparams size:align ...".
inline std::string format_meta(const std::vector<KernelMeta>& ks) {
    std::string s;
    for (const KernelMeta& k : ks) {
        s += k.name + " " + std::to_string(k.max_threads) + " " + std::to_string(k.min_blocks) + " " + std::to_string(k.size.size());
        for (size_t i = 0; i < k.size.size(); i++) s += " " + std::to_string(k.size[i]) + ":" + std::to_string(k.align[i]);
        s += "\n";
    }
    return s;
}

// Parameter offsets follow the kernel's C layout: each parameter at its own alignment.
inline void layout_params(KernelMeta& k) {
    uint32_t off = 0;
    k.offset.clear();
    for (size_t i = 0; i < k.size.size(); i++) {
        uint32_t a = k.align[i] ? k.align[i] : 1;
        off = (off + a - 1) / a * a;
        k.offset.push_back(off);
        off += k.size[i];
    }
    k.param_bytes = off;
}

inline bool parse_meta(const char* p, size_t n, std::vector<KernelMeta>& out) {
    std::string s(p, n);
    size_t pos = 0;
    while (pos < s.size()) {
        size_t e = s.find('\n', pos);
        if (e == std::string::npos) return false;
        std::string line = s.substr(pos, e - pos);
        pos = e + 1;
        KernelMeta k;
        char name[512];
        unsigned mt, mb, np;
        int used = 0;
        if (sscanf(line.c_str(), "%511s %u %u %u%n", name, &mt, &mb, &np, &used) != 4 || np > 4096) return false;
        k.name = name;
        k.max_threads = mt;
        k.min_blocks = mb;
        const char* q = line.c_str() + used;
        for (unsigned i = 0; i < np; i++) {
            unsigned sz, al;
            int u = 0;
            if (sscanf(q, " %u:%u%n", &sz, &al, &u) != 2) return false;
            if (al == 0 || (al & (al - 1)) != 0 || al > 256) return false;
            k.size.push_back(sz);
            k.align.push_back(al);
            q += u;
        }
        layout_params(k);
        out.push_back(k);
    }
    return true;
}

// Base64 for the PTX form of an image.
inline std::string b64encode(const uint8_t* p, size_t n) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string s;
    s.reserve((n + 2) / 3 * 4 + n / 57 + 2);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        s += t[v >> 18];
        s += t[(v >> 12) & 63];
        s += i + 1 < n ? t[(v >> 6) & 63] : '=';
        s += i + 2 < n ? t[v & 63] : '=';
    }
    return s;
}

inline bool b64decode(const char* p, size_t n, std::vector<uint8_t>& out) {
    uint32_t v = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        int d;
        if (c >= 'A' && c <= 'Z') d = c - 'A';
        else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
        else if (c >= '0' && c <= '9') d = c - '0' + 52;
        else if (c == '+') d = 62;
        else if (c == '/') d = 63;
        else if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
        else return false;
        v = (v << 6) | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back((uint8_t)(v >> bits));
        }
    }
    return true;
}

}  // namespace cudasim
