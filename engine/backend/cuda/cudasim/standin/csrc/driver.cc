// libcuda.so.1: the CUDA driver API of the stand-in, in the user's process.
//
// A context is a device process (cudasim-device) with its own device memory; this library
// keeps the driver's state (contexts, streams, events, modules, graphs), checks every call as
// the documentation says, and queues stream work. Work runs only at a synchronisation point
// (a stream, event or context sync, a synchronous copy), where the queued commands go to the
// device process in one batch, so a missing synchronisation leaves results visibly stale.
// Device addresses are reserved PROT_NONE in this process: dereferencing one here faults.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "proto.h"

extern char** environ;

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

using namespace cudasim;

namespace {

// ---- results ----
enum : int {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_NO_BINARY_FOR_GPU = 209,
    E_INVALID_PTX = 218,
    E_INVALID_HANDLE = 400,
    E_ILLEGAL_STATE = 401,
    E_NOT_FOUND = 500,
    E_NOT_READY = 600,
    E_ILLEGAL_ADDRESS = 700,
    E_LAUNCH_OUT_OF_RESOURCES = 701,
    E_LAUNCH_FAILED = 719,
    E_NOT_SUPPORTED = 801,
    E_CAPTURE_UNSUPPORTED = 900,
    E_CAPTURE_INVALIDATED = 901,
    E_CAPTURED_EVENT = 907,
    E_CAPTURE_WRONG_THREAD = 908,
    E_UNKNOWN = 999,
};

struct ErrorInfo {
    int code;
    const char* name;
    const char* text;
};
const ErrorInfo error_table[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorInfo* find_error(int code) {
    for (const ErrorInfo& e : error_table)
        if (e.code == code) return &e;
    return nullptr;
}

std::recursive_mutex mu;
#define LOCK std::lock_guard<std::recursive_mutex> lock_(mu)

// The detailed message of the last failure of each code, appended to cuGetErrorString's.
std::map<int, std::string*> details;

bool quiet() {
    static int q = -1;
    if (q < 0) {
        const char* s = getenv("CUDASIM_QUIET");
        q = s && *s && strcmp(s, "0") != 0;
    }
    return q;
}

void set_detail(int code, const std::string& what) {
    const ErrorInfo* e = find_error(code);
    std::string* s = new std::string(std::string(e ? e->text : "error") + " (cudasim: " + what + ")");
    details[code] = s;  // the old string stays valid: callers may hold it
}

// ---- device properties ----
constexpr int SM_MAJOR = 9, SM_MINOR = 0, SM = 90;
constexpr int DRIVER_VERSION = 12080;
constexpr int MAX_SHARED_OPTIN = 232448;
constexpr int DEFAULT_SHARED = 49152;
const char* DEVICE_NAME = "cudasim sm_90 (CPU stand-in)";

uint64_t total_memory() {
    static uint64_t t = 0;
    if (!t) {
        t = 16ull << 30;
        if (const char* s = getenv("CUDASIM_MEMORY")) {
            char* end;
            double v = strtod(s, &end);
            uint64_t mult = 1;
            if (*end == 'G' || *end == 'g') mult = 1ull << 30;
            if (*end == 'M' || *end == 'm') mult = 1ull << 20;
            if (v > 0) t = (uint64_t)(v * (double)mult);
        }
    }
    return t;
}

bool attribute(int a, int* v) {
    switch (a) {
        case 1: *v = 1024; return true;             // MAX_THREADS_PER_BLOCK
        case 2: *v = 1024; return true;             // MAX_BLOCK_DIM_X
        case 3: *v = 1024; return true;             // MAX_BLOCK_DIM_Y
        case 4: *v = 64; return true;               // MAX_BLOCK_DIM_Z
        case 5: *v = 2147483647; return true;       // MAX_GRID_DIM_X
        case 6: *v = 65535; return true;            // MAX_GRID_DIM_Y
        case 7: *v = 65535; return true;            // MAX_GRID_DIM_Z
        case 8: *v = DEFAULT_SHARED; return true;   // MAX_SHARED_MEMORY_PER_BLOCK
        case 9: *v = 65536; return true;            // TOTAL_CONSTANT_MEMORY
        case 10: *v = 32; return true;              // WARP_SIZE
        case 11: *v = 2147483647; return true;      // MAX_PITCH
        case 12: *v = 65536; return true;           // MAX_REGISTERS_PER_BLOCK
        case 13: *v = 1980000; return true;         // CLOCK_RATE (kHz)
        case 14: *v = 512; return true;             // TEXTURE_ALIGNMENT
        case 15: *v = 1; return true;               // GPU_OVERLAP
        case 16: *v = 132; return true;             // MULTIPROCESSOR_COUNT
        case 17: *v = 0; return true;               // KERNEL_EXEC_TIMEOUT
        case 18: *v = 0; return true;               // INTEGRATED
        case 19: *v = 1; return true;               // CAN_MAP_HOST_MEMORY
        case 20: *v = 0; return true;               // COMPUTE_MODE (default)
        case 30: *v = 512; return true;             // SURFACE_ALIGNMENT
        case 31: *v = 1; return true;               // CONCURRENT_KERNELS
        case 32: *v = 1; return true;               // ECC_ENABLED
        case 33: *v = 0; return true;               // PCI_BUS_ID
        case 34: *v = 0; return true;               // PCI_DEVICE_ID
        case 35: *v = 0; return true;               // TCC_DRIVER
        case 36: *v = 2619000; return true;         // MEMORY_CLOCK_RATE (kHz)
        case 37: *v = 5120; return true;            // GLOBAL_MEMORY_BUS_WIDTH
        case 38: *v = 50331648; return true;        // L2_CACHE_SIZE
        case 39: *v = 2048; return true;            // MAX_THREADS_PER_MULTIPROCESSOR
        case 40: *v = 3; return true;               // ASYNC_ENGINE_COUNT
        case 41: *v = 1; return true;               // UNIFIED_ADDRESSING
        case 50: *v = 0; return true;               // PCI_DOMAIN_ID
        case 75: *v = SM_MAJOR; return true;        // COMPUTE_CAPABILITY_MAJOR
        case 76: *v = SM_MINOR; return true;        // COMPUTE_CAPABILITY_MINOR
        case 78: *v = 1; return true;               // STREAM_PRIORITIES_SUPPORTED
        case 79: *v = 1; return true;               // GLOBAL_L1_CACHE_SUPPORTED
        case 80: *v = 1; return true;               // LOCAL_L1_CACHE_SUPPORTED
        case 81: *v = 233472; return true;          // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        case 82: *v = 65536; return true;           // MAX_REGISTERS_PER_MULTIPROCESSOR
        case 83: *v = 0; return true;               // MANAGED_MEMORY (not emulated)
        case 84: *v = 0; return true;               // MULTI_GPU_BOARD
        case 86: *v = 0; return true;               // HOST_NATIVE_ATOMIC_SUPPORTED
        case 88: *v = 0; return true;               // PAGEABLE_MEMORY_ACCESS
        case 89: *v = 0; return true;               // CONCURRENT_MANAGED_ACCESS
        case 90: *v = 1; return true;               // COMPUTE_PREEMPTION_SUPPORTED
        case 91: *v = 0; return true;               // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        case 95: *v = 0; return true;               // COOPERATIVE_LAUNCH (not emulated)
        case 97: *v = MAX_SHARED_OPTIN; return true;  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        case 99: *v = 0; return true;               // HOST_REGISTER_SUPPORTED
        case 102: *v = 0; return true;              // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        case 106: *v = 32; return true;             // MAX_BLOCKS_PER_MULTIPROCESSOR
        case 111: *v = 1024; return true;           // RESERVED_SHARED_MEMORY_PER_BLOCK
        case 115: *v = 0; return true;              // MEMORY_POOLS_SUPPORTED
    }
    return false;
}

// ---- the device address space (one per process, shared by contexts) ----
bool initialized;
uint64_t devbase;

struct AddressSpace {
    uint64_t bump = 0;
    std::map<uint64_t, uint64_t> free;  // offset -> length, coalesced
    std::deque<std::pair<uint64_t, uint64_t>> quarantine;
    uint64_t qbytes = 0;

    void release_to_free(uint64_t off, uint64_t len) {
        auto it = free.lower_bound(off);
        if (it != free.end() && off + len == it->first) {
            len += it->second;
            it = free.erase(it);
        }
        if (it != free.begin()) {
            auto p = std::prev(it);
            if (p->first + p->second == off) {
                p->second += len;
                return;
            }
        }
        free[off] = len;
    }
    bool alloc(uint64_t len, uint64_t* off) {
        for (int pass = 0; pass < 2; pass++) {
            for (auto it = free.begin(); it != free.end(); ++it) {
                if (it->second >= len) {
                    *off = it->first;
                    uint64_t rest = it->second - len, o = it->first + len;
                    free.erase(it);
                    if (rest) free[o] = rest;
                    return true;
                }
            }
            if (bump + len <= DEV_SPACE) {
                *off = bump;
                bump += len;
                return true;
            }
            // Out of fresh addresses: give the quarantined ones back.
            while (!quarantine.empty()) {
                release_to_free(quarantine.front().first, quarantine.front().second);
                quarantine.pop_front();
            }
            qbytes = 0;
        }
        return false;
    }
    // Freed addresses wait before reuse, so a dangling pointer faults instead of reaching
    // a newer allocation.
    void release(uint64_t off, uint64_t len) {
        quarantine.push_back({off, len});
        qbytes += len;
        while (qbytes > (64ull << 30) || quarantine.size() > 65536) {
            release_to_free(quarantine.front().first, quarantine.front().second);
            qbytes -= quarantine.front().second;
            quarantine.pop_front();
        }
    }
} space;

// ---- objects ----
struct Ctx;
struct Stream;
struct Event;

// A queued command: its bytes for the device process, and what this side does once it ran.
struct Cmd {
    uint64_t seq = 0;
    std::vector<uint8_t> data;
    Event* event = nullptr;  // CMD_EVENT: the event it completes
    uint64_t event_gen = 0;
    uint64_t temp_off = 0, temp_len = 0;  // a staging region to free after it ran
    bool ring = false;                     // the staging region is in the ring
    Stream* wait_stream = nullptr;         // a cuStreamWaitEvent marker: run that stream up to wait_seq first
    uint64_t wait_seq = 0;
};

struct Capture {
    int mode;  // 0 global, 1 thread-local, 2 relaxed
    long thread;
    std::vector<Cmd> cmds;
    int invalid = 0;
};

struct Stream {
    Ctx* ctx;
    unsigned flags;
    bool legacy;
    std::deque<Cmd> pending;
    std::unique_ptr<Capture> cap;
    bool blocking() const { return legacy || !(flags & 1); }
};

struct Event {
    Ctx* ctx;
    unsigned flags;
    uint32_t slot;
    bool recorded = false, done = false, captured = false;
    uint64_t gen = 0;
    Stream* stream = nullptr;
    uint64_t seq = 0;
    uint64_t ns = 0;
};

struct Function;
struct Module {
    Ctx* ctx;
    uint32_t id;
    uint32_t arch, flags;
    std::vector<KernelMeta> meta;
    std::vector<std::unique_ptr<Function>> funcs;
};

struct Function {
    Module* mod;
    uint32_t index;
    int max_dyn = DEFAULT_SHARED;
    int carveout = -1;
};

struct Graph {
    Ctx* ctx;
    std::vector<Cmd> cmds;
};

struct Alloc {
    uint64_t off, len;    // the address range, its guard page included
    uint64_t data, size;  // what the user got
    int kind;             // 0 device, 1 pinned host
};

struct Ctx {
    bool primary = false;
    int refs = 0;
    pid_t pid = -1;
    int pipe_wr = -1, mem_fd = -1, ctl_fd = -1;
    Control* ctl = nullptr;
    uint8_t* alias = nullptr;
    std::map<uint64_t, Alloc> allocs;  // device allocations by address
    std::map<uint64_t, Alloc> pinned;  // pinned host allocations by host address
    uint64_t used = 0;
    std::vector<uint8_t> maps;  // CMD_MAP/UNMAP for the next batch
    Stream* legacy = nullptr;
    std::vector<Stream*> streams;  // legacy first
    std::unordered_map<long, Stream*> per_thread;
    int sticky = 0;
    uint64_t seq = 0;
    std::vector<uint32_t> free_slots;
    uint32_t next_slot = 0;
    uint32_t next_module = 1;
    uint64_t ring_off = 0, ring_head = 0;  // staging ring
    std::vector<uint64_t> ring_live;       // seqs using the ring, oldest first
};

std::unordered_set<Ctx*> contexts;
std::unordered_set<Stream*> streams;
std::unordered_set<Event*> events;
std::unordered_set<Module*> modules;
std::unordered_set<Function*> functions;
std::unordered_set<Graph*> graphs;
std::unordered_set<Graph*> execs;
Ctx* primary_ctx;

thread_local std::vector<Ctx*> ctx_stack;

long thread_id() { return (long)syscall(SYS_gettid); }

Ctx* current() {
    while (!ctx_stack.empty() && !contexts.count(ctx_stack.back())) ctx_stack.pop_back();
    return ctx_stack.empty() ? nullptr : ctx_stack.back();
}

long futex(void* addr, int op, uint32_t val, const struct timespec* ts = nullptr) {
    return syscall(SYS_futex, addr, op, val, ts, nullptr, 0);
}

// ---- the device process ----

std::string device_binary() {
    Dl_info di;
    if (dladdr((void*)&device_binary, &di) && di.dli_fname) {
        std::string p = di.dli_fname;
        size_t s = p.rfind('/');
        return (s == std::string::npos ? std::string(".") : p.substr(0, s)) + "/cudasim-device";
    }
    return "cudasim-device";
}

void ctx_fatal(Ctx* c, int code, const std::string& what) {
    if (!c->sticky) {
        c->sticky = code;
        set_detail(code, what);
        if (!quiet()) fprintf(stderr, "cudasim: %s\n", what.c_str());
    }
}

int high_fd(int fd) {
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    close(fd);
    return h;
}

CUresult start_device(Ctx* c, std::string& why) {
    c->ctl_fd = high_fd(memfd_create("cudasim-control", MFD_CLOEXEC));
    c->mem_fd = high_fd(memfd_create("cudasim-memory", MFD_CLOEXEC));
    if (c->ctl_fd < 0 || c->mem_fd < 0 || ftruncate(c->ctl_fd, (off_t)control_size()) != 0 ||
        ftruncate(c->mem_fd, (off_t)DEV_SPACE) != 0) {
        why = std::string("memfd: ") + strerror(errno);
        return E_OUT_OF_MEMORY;
    }
    c->ctl = (Control*)mmap(nullptr, control_size(), PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, 0);
    // The host view of the context's memory, at an address the device process can map too:
    // pinned host memory is then reachable from kernels at its host address, as with UVA.
    c->alias = (uint8_t*)MAP_FAILED;
    for (uint64_t base = devbase + 2 * DEV_SPACE; base + DEV_SPACE <= 0x780000000000ull && c->alias == MAP_FAILED; base += DEV_SPACE) {
        void* p = mmap((void*)base, DEV_SPACE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, c->mem_fd, 0);
        if (p == (void*)base) c->alias = (uint8_t*)p;
        else if (p != MAP_FAILED) munmap(p, DEV_SPACE);
    }
    if (c->alias == MAP_FAILED)
        c->alias = (uint8_t*)mmap(nullptr, DEV_SPACE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, c->mem_fd, 0);
    if (c->ctl == MAP_FAILED || c->alias == MAP_FAILED) {
        why = std::string("mmap: ") + strerror(errno);
        return E_OUT_OF_MEMORY;
    }
    c->ctl->magic = PROTO_MAGIC;
    c->ctl->version = PROTO_VERSION;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        why = std::string("pipe: ") + strerror(errno);
        return E_UNKNOWN;
    }
    int pr = high_fd(p[0]);
    c->pipe_wr = p[1];
    std::string bin = device_binary();
    char base[32], alias[32];
    snprintf(base, sizeof base, "%llx", (unsigned long long)devbase);
    snprintf(alias, sizeof alias, "%llx", (unsigned long long)(uintptr_t)c->alias);
    const char* argv[] = {bin.c_str(), "3", "4", "5", base, alias, nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, c->ctl_fd, 3);
    posix_spawn_file_actions_adddup2(&fa, c->mem_fd, 4);
    posix_spawn_file_actions_adddup2(&fa, pr, 5);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int r = posix_spawn(&c->pid, bin.c_str(), &fa, &at, (char* const*)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(pr);
    if (r != 0) {
        why = "cannot start " + bin + ": " + strerror(r);
        c->pid = -1;
        return E_UNKNOWN;
    }
    for (int waited = 0; !__atomic_load_n(&c->ctl->ready, __ATOMIC_ACQUIRE); waited++) {
        struct timespec ts = {0, 100000000};
        futex(&c->ctl->ready, FUTEX_WAIT, 0, &ts);
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            why = bin + " exited at start (" + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st)) + ")";
            c->pid = -1;
            return E_UNKNOWN;
        }
        if (waited > 300) {
            why = bin + " did not start within 30 s";
            return E_UNKNOWN;
        }
    }
    return OK;
}

void stop_device(Ctx* c) {
    if (c->pipe_wr >= 0) close(c->pipe_wr);
    if (c->pid > 0) {
        int st;
        if (waitpid(c->pid, &st, 0) < 0 && errno == EINTR) waitpid(c->pid, &st, 0);
    }
    if (c->ctl && c->ctl != MAP_FAILED) munmap(c->ctl, control_size());
    if (c->alias && c->alias != MAP_FAILED) munmap(c->alias, DEV_SPACE);
    if (c->ctl_fd >= 0) close(c->ctl_fd);
    if (c->mem_fd >= 0) close(c->mem_fd);
}

// Sends bytes as one batch and waits for it. Failures the device process calls fatal end the
// context (its later calls return the same code).
CUresult submit(Ctx* c, const std::vector<uint8_t>& bytes) {
    if (c->sticky) return c->sticky;
    if (bytes.size() > CMD_CAPACITY) return E_OUT_OF_MEMORY;
    memcpy(c->ctl->cmd, bytes.data(), bytes.size());
    c->ctl->cmd_bytes = bytes.size();
    c->ctl->status = 0;
    c->ctl->fatal = 0;
    uint32_t req = c->ctl->req + 1;
    __atomic_store_n(&c->ctl->req, req, __ATOMIC_RELEASE);
    futex(&c->ctl->req, FUTEX_WAKE, INT_MAX);
    for (;;) {
        uint32_t a = __atomic_load_n(&c->ctl->ack, __ATOMIC_ACQUIRE);
        if (a == req) break;
        struct timespec ts = {0, 200000000};
        futex(&c->ctl->ack, FUTEX_WAIT, a, &ts);
        int st;
        if (__atomic_load_n(&c->ctl->ack, __ATOMIC_ACQUIRE) != req && waitpid(c->pid, &st, WNOHANG) == c->pid) {
            c->pid = -1;
            char b[128];
            snprintf(b, sizeof b, "the device process died (%s %d)", WIFSIGNALED(st) ? "signal" : "exit status",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            ctx_fatal(c, E_LAUNCH_FAILED, b);
            return E_LAUNCH_FAILED;
        }
    }
    int st = c->ctl->status;
    if (st) {
        std::string d(c->ctl->detail, strnlen(c->ctl->detail, DETAIL_SIZE));
        if (c->ctl->fatal) {
            ctx_fatal(c, st, d);
        } else {
            set_detail(st, d);
        }
    }
    return st;
}

// ---- commands ----

template <typename T>
Cmd make_cmd(uint32_t type, const T& body, const void* extra = nullptr, size_t extra_len = 0) {
    Cmd c;
    size_t n = align16((uint32_t)(sizeof(T) + extra_len));
    c.data.resize(n);
    memcpy(c.data.data(), &body, sizeof(T));
    if (extra_len) memcpy(c.data.data() + sizeof(T), extra, extra_len);
    CmdHeader* h = (CmdHeader*)c.data.data();
    h->type = type;
    h->size = (uint32_t)n;
    return c;
}

void queue_map(Ctx* c, uint32_t type, uint64_t addr, uint64_t len, uint64_t data, uint64_t data_len, uint32_t kind) {
    CmdMap m{};
    m.addr = addr;
    m.len = len;
    m.data = data;
    m.data_len = data_len;
    m.kind = kind;
    Cmd cm = make_cmd(type, m);
    c->maps.insert(c->maps.end(), cm.data.begin(), cm.data.end());
}

void release_staging(Ctx* c, Cmd& cmd);

// Runs the pending work of the streams in set whose sequence number is at most limit, in
// the order it was queued.
CUresult flush(Ctx* c, const std::vector<Stream*>& set, uint64_t limit) {
    if (c->sticky) return c->sticky;
    std::vector<uint8_t> bytes = std::move(c->maps);
    c->maps.clear();
    std::vector<Cmd> ran;
    auto send = [&]() -> CUresult {
        if (bytes.empty()) return OK;
        CUresult r = submit(c, bytes);
        bytes.clear();
        for (Cmd& cmd : ran) {
            if (cmd.event && events.count(cmd.event) && cmd.event->gen == cmd.event_gen) {
                cmd.event->done = true;
                cmd.event->ns = c->ctl->event_ns[cmd.event->slot];
            }
            release_staging(c, cmd);
        }
        ran.clear();
        return r;
    };
    for (;;) {
        Stream* best = nullptr;
        for (Stream* s : set)
            if (!s->pending.empty() && s->pending.front().seq <= limit && (!best || s->pending.front().seq < best->pending.front().seq))
                best = s;
        if (!best) break;
        Cmd cmd = std::move(best->pending.front());
        best->pending.pop_front();
        if (cmd.wait_stream) {
            Stream* d = cmd.wait_stream;
            if (streams.count(d) && !d->pending.empty() && d->pending.front().seq <= cmd.wait_seq &&
                std::find(set.begin(), set.end(), d) == set.end()) {
                if (CUresult r = send()) return r;
                if (CUresult r = flush(c, {d}, cmd.wait_seq)) return r;
            }
            continue;
        }
        if (bytes.size() + cmd.data.size() > CMD_CAPACITY) {
            if (CUresult r = send()) return r;
        }
        bytes.insert(bytes.end(), cmd.data.begin(), cmd.data.end());
        ran.push_back(std::move(cmd));
    }
    return send();
}

// The streams a synchronisation of s waits for: s alone when it does not synchronise with
// the legacy default stream, else that stream and every blocking stream.
std::vector<Stream*> sync_set(Stream* s) {
    if (!s->blocking()) return {s};
    std::vector<Stream*> v;
    for (Stream* x : s->ctx->streams)
        if (x->blocking()) v.push_back(x);
    return v;
}

CUresult flush_all(Ctx* c) { return flush(c, c->streams, UINT64_MAX); }

// ---- staging for pageable copies and module images ----

void release_staging(Ctx* c, Cmd& cmd) {
    if (!cmd.temp_len) return;
    if (cmd.ring) {
        auto it = std::find(c->ring_live.begin(), c->ring_live.end(), cmd.seq);
        if (it != c->ring_live.end()) c->ring_live.erase(it);
        if (c->ring_live.empty()) c->ring_head = 0;
    } else {
        fallocate(c->mem_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)cmd.temp_off, (off_t)cmd.temp_len);
        queue_map(c, CMD_UNMAP, devbase + cmd.temp_off, cmd.temp_len, 0, 0, 2);
        space.release(cmd.temp_off, cmd.temp_len);
    }
    cmd.temp_len = 0;
}

// Staging bytes visible to the device process for cmd (copied now, read when it runs).
bool stage(Ctx* c, Cmd& cmd, const void* src, uint64_t n, uint64_t* dev) {
    uint64_t need = (n + 255) & ~255ull;
    if (c->ring_head + need <= STAGING_SIZE) {
        cmd.temp_off = c->ring_off + c->ring_head;
        cmd.temp_len = need;
        cmd.ring = true;
        c->ring_head += need;
        c->ring_live.push_back(cmd.seq);
    } else {
        uint64_t len = (n + PAGE - 1) / PAGE * PAGE, off;
        if (!space.alloc(len, &off)) return false;
        cmd.temp_off = off;
        cmd.temp_len = len;
        cmd.ring = false;
        queue_map(c, CMD_MAP, devbase + off, len, devbase + off, n, 2);
    }
    memcpy(c->alias + cmd.temp_off, src, n);
    *dev = devbase + cmd.temp_off;
    return true;
}

// ---- captures ----

std::vector<Stream*> capturing_streams() {
    std::vector<Stream*> v;
    for (Stream* s : streams)
        if (s->cap) v.push_back(s);
    return v;
}

// A call that a capture forbids (it would synchronise, or allocate outside the graph):
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated.
CUresult capture_guard() {
    long me = thread_id();
    CUresult r = OK;
    for (Stream* s : capturing_streams()) {
        bool mine = s->cap->thread == me && s->cap->mode != 2;
        bool global = s->cap->mode == 0;
        if (mine || global) {
            if (!s->cap->invalid) s->cap->invalid = E_CAPTURE_UNSUPPORTED;
            r = E_CAPTURE_UNSUPPORTED;
        }
    }
    return r;
}

CUresult enqueue(Stream* s, Cmd&& cmd) {
    Ctx* c = s->ctx;
    if (s->cap) {
        if (s->cap->invalid) return E_CAPTURE_INVALIDATED;
        s->cap->cmds.push_back(std::move(cmd));
        return OK;
    }
    cmd.seq = ++c->seq;
    s->pending.push_back(std::move(cmd));
    return OK;
}

// ---- lookups ----

Stream* new_stream(Ctx* c, unsigned flags, bool legacy) {
    Stream* s = new Stream();
    s->ctx = c;
    s->flags = flags;
    s->legacy = legacy;
    c->streams.push_back(s);
    streams.insert(s);
    return s;
}

// The stream a handle names: 0 and CU_STREAM_LEGACY (1) are the current context's legacy
// default stream, CU_STREAM_PER_THREAD (2) the thread's own default stream.
CUresult get_stream(void* h, Stream** out) {
    uintptr_t v = (uintptr_t)h;
    if (v <= 2) {
        Ctx* c = current();
        if (!c) return E_INVALID_CONTEXT;
        if (c->sticky) return c->sticky;
        if (v == 2) {
            Stream*& s = c->per_thread[thread_id()];
            if (!s) s = new_stream(c, 0, false);
            *out = s;
        } else {
            *out = c->legacy;
        }
        return OK;
    }
    Stream* s = (Stream*)h;
    if (!streams.count(s)) return E_INVALID_HANDLE;
    if (s->ctx->sticky) return s->ctx->sticky;
    *out = s;
    return OK;
}

// The current context, or the reason there is none.
CUresult need_ctx(Ctx** c) {
    if (!initialized) return E_NOT_INITIALIZED;
    *c = current();
    if (!*c) return E_INVALID_CONTEXT;
    return (*c)->sticky;
}

// The device allocation holding [p, p+n), or null.
Alloc* find_alloc(Ctx* c, uint64_t p, uint64_t n) {
    auto it = c->allocs.upper_bound(p);
    if (it == c->allocs.begin()) return nullptr;
    Alloc& a = std::prev(it)->second;
    if (p < a.data || p + n > a.data + a.size || p + n < p) return nullptr;
    return &a;
}

Alloc* find_pinned(Ctx* c, const void* h, uint64_t n) {
    uint64_t p = (uint64_t)h;
    auto it = c->pinned.upper_bound(p);
    if (it == c->pinned.begin()) return nullptr;
    Alloc& a = std::prev(it)->second;
    if (p < (uint64_t)c->alias + a.data - devbase || p + n > (uint64_t)c->alias + a.data - devbase + a.size) return nullptr;
    return &a;
}

// The device process' address of pinned host memory at h.
uint64_t pinned_dev(Ctx* c, const void* h) { return devbase + ((const uint8_t*)h - c->alias); }

uint8_t* host_view(Ctx* c, uint64_t dev) { return c->alias + (dev - devbase); }

CUresult new_context(Ctx** out) {
    Ctx* c = new Ctx();
    std::string why;
    CUresult r = start_device(c, why);
    if (r) {
        set_detail(r, "cannot start the device process: " + why);
        if (!quiet()) fprintf(stderr, "cudasim: cannot start the device process: %s\n", why.c_str());
        stop_device(c);
        delete c;
        return r;
    }
    contexts.insert(c);
    c->legacy = new_stream(c, 0, true);
    uint64_t off;
    if (!space.alloc(STAGING_SIZE, &off)) {
        stop_device(c);
        contexts.erase(c);
        delete c;
        return E_OUT_OF_MEMORY;
    }
    c->ring_off = off;
    queue_map(c, CMD_MAP, devbase + off, STAGING_SIZE, devbase + off, STAGING_SIZE, 2);
    *out = c;
    return OK;
}

void free_range(Ctx* c, const Alloc& a) {
    fallocate(c->mem_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a.off, (off_t)a.len);
    space.release(a.off, a.len);
}

void destroy_context(Ctx* c) {
    stop_device(c);
    for (Stream* s : c->streams) {
        streams.erase(s);
        delete s;
    }
    for (auto it = events.begin(); it != events.end();) {
        if ((*it)->ctx == c) {
            delete *it;
            it = events.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = modules.begin(); it != modules.end();) {
        if ((*it)->ctx == c) {
            for (auto& f : (*it)->funcs) functions.erase(f.get());
            delete *it;
            it = modules.erase(it);
        } else {
            ++it;
        }
    }
    for (auto* set : {&graphs, &execs}) {
        for (auto it = set->begin(); it != set->end();) {
            if ((*it)->ctx == c) {
                delete *it;
                it = set->erase(it);
            } else {
                ++it;
            }
        }
    }
    for (auto& [p, a] : c->allocs) space.release(a.off, a.len);
    for (auto& [p, a] : c->pinned) space.release(a.off, a.len);
    space.release(c->ring_off, STAGING_SIZE);
    contexts.erase(c);
    if (primary_ctx == c) primary_ctx = nullptr;
    delete c;
}

// Device memory: a guard page, then pages holding size bytes that end at the next guard
// page, starting 256-byte aligned as cudaMalloc's; filled with 0xFF bytes (NaN).
CUresult alloc_range(Ctx* c, uint64_t size, int kind, Alloc* out) {
    uint64_t body = kind == 0 ? (size + 255) & ~255ull : size;
    uint64_t pages = (body + PAGE - 1) / PAGE * PAGE;
    uint64_t len = pages + PAGE, off;
    if (!space.alloc(len, &off)) return E_OUT_OF_MEMORY;
    Alloc a;
    a.off = off;
    a.len = len;
    a.size = size;
    a.kind = kind;
    a.data = kind == 0 ? devbase + off + len - body : devbase + off + PAGE;
    memset(c->alias + off + PAGE, 0xFF, pages);
    queue_map(c, CMD_MAP, devbase + off + PAGE, pages, a.data, size, (uint32_t)kind);
    *out = a;
    return OK;
}

}  // namespace

// =====================================================================================
// Initialisation and devices

API CUresult cuInit(unsigned int flags) {
    LOCK;
    if (flags != 0) return E_INVALID_VALUE;
    if (initialized) return OK;
    if (const char* s = getenv("CUDASIM_DEVICES"); s && strcmp(s, "0") == 0) return E_NO_DEVICE;
    // Device addresses: reserved here so that nothing of this process lands there, and so
    // that dereferencing one faults.
    for (uint64_t base = 0x300000000000ull; base < 0x700000000000ull; base += 0x20000000000ull) {
        void* p = mmap((void*)base, DEV_SPACE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void*)base) {
            devbase = base;
            break;
        }
        if (p != MAP_FAILED) munmap(p, DEV_SPACE);
    }
    if (!devbase) {
        set_detail(E_OUT_OF_MEMORY, "no room for the device address space");
        return E_OUT_OF_MEMORY;
    }
    space.bump = 0;
    initialized = true;
    return OK;
}

API CUresult cuDriverGetVersion(int* v) {
    if (!v) return E_INVALID_VALUE;
    *v = DRIVER_VERSION;
    return OK;
}

API CUresult cuDeviceGetCount(int* n) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!n) return E_INVALID_VALUE;
    *n = 1;
    return OK;
}

API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!d) return E_INVALID_VALUE;
    if (ordinal != 0) return E_INVALID_DEVICE;
    *d = 0;
    return OK;
}

API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!name || len <= 0) return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return OK;
}

API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!v) return E_INVALID_VALUE;
    return attribute(attr, v) ? OK : E_INVALID_VALUE;
}

API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!bytes) return E_INVALID_VALUE;
    *bytes = total_memory();
    return OK;
}

API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!major || !minor) return E_INVALID_VALUE;
    *major = SM_MAJOR;
    *minor = SM_MINOR;
    return OK;
}

API CUresult cuDeviceGetUuid(unsigned char* uuid, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!uuid) return E_INVALID_VALUE;
    const unsigned char u[16] = {'c', 'u', 'd', 'a', 's', 'i', 'm', 0, 0, 0, 0, 0, 0, 0, 0, 1};
    memcpy(uuid, u, 16);
    return OK;
}

API CUresult cuDeviceGetUuid_v2(unsigned char* uuid, CUdevice d) { return cuDeviceGetUuid(uuid, d); }

API CUresult cuGetErrorName(CUresult r, const char** s) {
    if (!s) return E_INVALID_VALUE;
    const ErrorInfo* e = find_error(r);
    if (!e) {
        *s = nullptr;
        return E_INVALID_VALUE;
    }
    *s = e->name;
    return OK;
}

API CUresult cuGetErrorString(CUresult r, const char** s) {
    if (!s) return E_INVALID_VALUE;
    LOCK;
    const ErrorInfo* e = find_error(r);
    if (!e) {
        *s = nullptr;
        return E_INVALID_VALUE;
    }
    auto it = details.find(r);
    *s = it != details.end() ? it->second->c_str() : e->text;
    return OK;
}

// =====================================================================================
// Contexts

API CUresult cuDevicePrimaryCtxRetain(Ctx** out, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!out) return E_INVALID_VALUE;
    if (!primary_ctx) {
        Ctx* c;
        if (CUresult r = new_context(&c)) return r;
        c->primary = true;
        primary_ctx = c;
    }
    primary_ctx->refs++;
    *out = primary_ctx;
    return OK;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!primary_ctx || primary_ctx->refs <= 0) return E_INVALID_CONTEXT;
    if (--primary_ctx->refs == 0) destroy_context(primary_ctx);  // reset with its last reference
    return OK;
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (primary_ctx) {
        int refs = primary_ctx->refs;
        destroy_context(primary_ctx);
        if (refs > 0) {
            Ctx* c;
            if (CUresult r = new_context(&c)) return r;
            c->primary = true;
            c->refs = refs;
            primary_ctx = c;
        }
    }
    return OK;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int* flags, int* active) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!flags || !active) return E_INVALID_VALUE;
    *flags = 0;
    *active = primary_ctx && primary_ctx->refs > 0;
    return OK;
}

API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (flags & ~0x1fu) return E_INVALID_VALUE;
    return OK;
}

API CUresult cuCtxCreate_v2(Ctx** out, unsigned int flags, CUdevice d) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (d != 0) return E_INVALID_DEVICE;
    if (!out || (flags & ~0x1fu)) return E_INVALID_VALUE;
    Ctx* c;
    if (CUresult r = new_context(&c)) return r;
    ctx_stack.push_back(c);
    *out = c;
    return OK;
}

API CUresult cuCtxDestroy_v2(Ctx* c) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!contexts.count(c) || c->primary) return E_INVALID_CONTEXT;
    destroy_context(c);
    current();
    return OK;
}

API CUresult cuCtxSetCurrent(Ctx* c) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (c && !contexts.count(c)) return E_INVALID_CONTEXT;
    current();
    if (!c) {
        if (!ctx_stack.empty()) ctx_stack.pop_back();
    } else if (ctx_stack.empty()) {
        ctx_stack.push_back(c);
    } else {
        ctx_stack.back() = c;
    }
    return OK;
}

API CUresult cuCtxGetCurrent(Ctx** out) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!out) return E_INVALID_VALUE;
    *out = current();
    return OK;
}

API CUresult cuCtxPushCurrent_v2(Ctx* c) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!contexts.count(c)) return E_INVALID_CONTEXT;
    current();
    ctx_stack.push_back(c);
    return OK;
}

API CUresult cuCtxPopCurrent_v2(Ctx** out) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    Ctx* c = current();
    if (!c) return E_INVALID_CONTEXT;
    ctx_stack.pop_back();
    if (out) *out = c;
    return OK;
}

API CUresult cuCtxGetDevice(CUdevice* d) {
    LOCK;
    Ctx* c;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!(c = current())) return E_INVALID_CONTEXT;
    if (!d) return E_INVALID_VALUE;
    *d = 0;
    return OK;
}

API CUresult cuCtxSynchronize() {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    CUresult r = capture_guard();
    for (Stream* s : c->streams) {  // it would wait for a capturing stream, whatever the mode
        if (s->cap) {
            if (!s->cap->invalid) s->cap->invalid = E_CAPTURE_UNSUPPORTED;
            r = E_CAPTURE_UNSUPPORTED;
        }
    }
    if (r) return r;
    return flush_all(c);
}

// =====================================================================================
// Memory

API CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!free_b || !total) return E_INVALID_VALUE;
    uint64_t used = 0;
    for (Ctx* x : contexts) used += x->used;
    *total = total_memory();
    *free_b = used >= total_memory() ? 0 : total_memory() - used;
    return OK;
}

API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!p || size == 0) return E_INVALID_VALUE;
    // CUDA 13 drivers refuse allocations during a capture (12.x let them through).
    if (CUresult r = capture_guard()) return r;
    uint64_t charged = (size + PAGE - 1) / PAGE * PAGE;
    uint64_t used = 0;
    for (Ctx* x : contexts) used += x->used;
    if (used + charged > total_memory()) return E_OUT_OF_MEMORY;
    Alloc a;
    if (CUresult r = alloc_range(c, size, 0, &a)) return r;
    c->allocs[a.data] = a;
    c->used += charged;
    *p = a.data;
    return OK;
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (p == 0) return OK;
    Ctx* owner = nullptr;
    for (Ctx* x : contexts)
        if (x->allocs.count(p)) owner = x;
    if (!owner) return E_INVALID_VALUE;
    if (CUresult r = capture_guard()) return r;
    if (CUresult r = flush_all(owner)) return r;  // cuMemFree waits for the work that may use it
    Alloc a = owner->allocs[p];
    owner->allocs.erase(p);
    owner->used -= (a.size + PAGE - 1) / PAGE * PAGE;
    queue_map(owner, CMD_UNMAP, devbase + a.off + PAGE, a.len - PAGE, a.data, a.size, 0);
    free_range(owner, a);
    return OK;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    for (Ctx* x : contexts) {
        if (Alloc* a = find_alloc(x, p, 1)) {
            if (base) *base = a->data;
            if (size) *size = a->size;
            return OK;
        }
    }
    return E_NOT_FOUND;
}

API CUresult cuMemHostAlloc(void** pp, size_t size, unsigned int flags) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!pp || size == 0 || (flags & ~7u)) return E_INVALID_VALUE;
    Alloc a;
    if (CUresult r = alloc_range(c, size, 1, &a)) return r;
    void* h = host_view(c, a.data);
    c->pinned[(uint64_t)h] = a;
    *pp = h;
    return OK;
}

API CUresult cuMemAllocHost_v2(void** pp, size_t size) { return cuMemHostAlloc(pp, size, 0); }

// With unified addressing the device reaches pinned host memory at its host address.
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* p, void* h, unsigned int flags) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!p || flags != 0) return E_INVALID_VALUE;
    for (Ctx* x : contexts) {
        if (find_pinned(x, h, 1)) {
            *p = (CUdeviceptr)h;
            return OK;
        }
    }
    return E_INVALID_VALUE;
}

API CUresult cuMemFreeHost(void* h) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    for (Ctx* c : contexts) {
        auto it = c->pinned.find((uint64_t)h);
        if (it == c->pinned.end()) continue;
        if (c->sticky) return c->sticky;
        if (CUresult r = capture_guard()) return r;
        if (CUresult r = flush_all(c)) return r;
        Alloc a = it->second;
        c->pinned.erase(it);
        queue_map(c, CMD_UNMAP, devbase + a.off + PAGE, a.len - PAGE, a.data, a.size, 1);
        free_range(c, a);
        return OK;
    }
    return E_INVALID_VALUE;
}

namespace {

// Copy and memset commands.
Cmd copy_cmd(uint64_t dst, uint64_t src, uint64_t n) {
    CmdCopy cc{};
    cc.dst = dst;
    cc.src = src;
    cc.len = n;
    return make_cmd(CMD_COPY, cc);
}

CUresult memset_to(Stream* s, CUdeviceptr dst, uint32_t value, uint32_t elem, size_t count) {
    Ctx* c = s->ctx;
    if (dst % elem) return E_INVALID_VALUE;
    if (count == 0) return OK;
    if (!find_alloc(c, dst, (uint64_t)count * elem)) return E_INVALID_VALUE;
    CmdMemset m{};
    m.dst = dst;
    m.count = count;
    m.value = value;
    m.elem = elem;
    return enqueue(s, make_cmd(CMD_MEMSET, m));
}

CUresult htod(Stream* s, CUdeviceptr dst, const void* src, size_t n, bool sync) {
    Ctx* c = s->ctx;
    if (n == 0) return OK;
    if (!src || !find_alloc(c, dst, n)) return E_INVALID_VALUE;
    if (sync) {
        if (CUresult r = capture_guard()) return r;
        if (CUresult r = flush(c, sync_set(s), UINT64_MAX)) return r;
        memcpy(host_view(c, dst), src, n);
        return OK;
    }
    if (find_pinned(c, src, n)) return enqueue(s, copy_cmd(dst, pinned_dev(c, src), n));  // read when it runs
    // Pageable memory is copied now (the driver stages it), so the caller may reuse it.
    if (s->cap) {
        s->cap->invalid = E_CAPTURE_UNSUPPORTED;
        return E_CAPTURE_UNSUPPORTED;
    }
    Cmd cmd = copy_cmd(dst, 0, n);
    cmd.seq = c->seq + 1;
    uint64_t staged;
    if (!stage(c, cmd, src, n, &staged)) return E_OUT_OF_MEMORY;
    ((CmdCopy*)cmd.data.data())->src = staged;
    return enqueue(s, std::move(cmd));
}

CUresult dtoh(Stream* s, void* dst, CUdeviceptr src, size_t n, bool sync) {
    Ctx* c = s->ctx;
    if (n == 0) return OK;
    if (!dst || !find_alloc(c, src, n)) return E_INVALID_VALUE;
    if (!sync && find_pinned(c, dst, n)) return enqueue(s, copy_cmd(pinned_dev(c, dst), src, n));  // written when it runs
    // Into pageable memory the copy completes before the call returns.
    if (s->cap) {
        s->cap->invalid = E_CAPTURE_UNSUPPORTED;
        return E_CAPTURE_UNSUPPORTED;
    }
    if (sync)
        if (CUresult r = capture_guard()) return r;
    if (CUresult r = flush(c, sync_set(s), UINT64_MAX)) return r;
    memcpy(dst, host_view(c, src), n);
    return OK;
}

CUresult dtod(Stream* s, CUdeviceptr dst, CUdeviceptr src, size_t n) {
    Ctx* c = s->ctx;
    if (n == 0) return OK;
    if (!find_alloc(c, dst, n) || !find_alloc(c, src, n)) return E_INVALID_VALUE;
    return enqueue(s, copy_cmd(dst, src, n));
}

}  // namespace

#define STREAM_OR_RETURN(h, s)                          \
    if (!initialized) return E_NOT_INITIALIZED;         \
    Stream* s;                                          \
    if (CUresult r_ = get_stream((void*)(h), &s)) return r_

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return htod(s, dst, src, n, true);
}
API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return dtoh(s, dst, src, n, true);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return dtod(s, dst, src, n);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return htod(s, dst, src, n, false);
}
API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return dtoh(s, dst, src, n, false);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return dtod(s, dst, src, n);
}

namespace {
// cuMemcpy with unified addressing: the direction from where each pointer lives.
CUresult copy_any(uint64_t dst, uint64_t src, size_t n, void* stream, bool sync) {
    STREAM_OR_RETURN(stream, s);
    Ctx* c = s->ctx;
    bool ddev = find_alloc(c, dst, n ? n : 1) != nullptr, sdev = find_alloc(c, src, n ? n : 1) != nullptr;
    if (ddev && sdev) return dtod(s, dst, src, n);
    if (ddev) return htod(s, dst, (const void*)src, n, sync);
    if (sdev) return dtoh(s, (void*)dst, src, n, sync);
    if (n == 0) return OK;
    if (CUresult r = flush(c, sync_set(s), UINT64_MAX)) return r;
    memmove((void*)dst, (const void*)src, n);
    return OK;
}
}  // namespace

API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    LOCK;
    return copy_any(dst, src, n, nullptr, true);
}
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
    LOCK;
    return copy_any(dst, src, n, stream, false);
}

// The synchronous memsets are asynchronous to the host on device memory (legacy stream).
API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return memset_to(s, d, v, 1, n);
}
API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return memset_to(s, d, v, 2, n);
}
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
    LOCK;
    STREAM_OR_RETURN(0, s);
    return memset_to(s, d, v, 4, n);
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return memset_to(s, d, v, 1, n);
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return memset_to(s, d, v, 2, n);
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, void* stream) {
    LOCK;
    STREAM_OR_RETURN(stream, s);
    return memset_to(s, d, v, 4, n);
}

// =====================================================================================
// Streams and events

API CUresult cuStreamCreate(Stream** out, unsigned int flags) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!out || flags > 1) return E_INVALID_VALUE;
    *out = new_stream(c, flags, false);
    return OK;
}

API CUresult cuStreamCreateWithPriority(Stream** out, unsigned int flags, int priority) {
    (void)priority;
    return cuStreamCreate(out, flags);
}

API CUresult cuStreamDestroy_v2(Stream* s) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if ((uintptr_t)s <= 2 || !streams.count(s)) return E_INVALID_HANDLE;
    if (s->cap) return E_CAPTURE_UNSUPPORTED;
    Ctx* c = s->ctx;
    CUresult r = OK;
    if (!s->pending.empty()) r = flush(c, {s}, UINT64_MAX);  // its queued work still runs
    for (auto& [t, ps] : c->per_thread)
        if (ps == s) ps = nullptr;
    c->streams.erase(std::find(c->streams.begin(), c->streams.end(), s));
    streams.erase(s);
    for (Stream* x : c->streams)
        for (Cmd& cmd : x->pending)
            if (cmd.wait_stream == s) cmd.wait_stream = nullptr;
    delete s;
    return r == OK || c->sticky ? OK : r;
}

API CUresult cuStreamSynchronize(void* h) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (s->cap) {
        s->cap->invalid = E_CAPTURE_UNSUPPORTED;
        return E_CAPTURE_UNSUPPORTED;
    }
    return flush(s->ctx, sync_set(s), UINT64_MAX);
}

// Work never runs by itself here: a query runs it and says it was not ready yet, so code
// that polls terminates and code that assumes completion without synchronising fails.
API CUresult cuStreamQuery(void* h) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (s->cap) {
        s->cap->invalid = E_CAPTURE_UNSUPPORTED;
        return E_CAPTURE_UNSUPPORTED;
    }
    if (s->pending.empty()) return OK;
    if (CUresult r = flush(s->ctx, sync_set(s), UINT64_MAX)) return r;
    return E_NOT_READY;
}

API CUresult cuStreamGetFlags(void* h, unsigned int* flags) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!flags) return E_INVALID_VALUE;
    *flags = s->flags;
    return OK;
}

API CUresult cuStreamGetCtx(void* h, Ctx** out) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!out) return E_INVALID_VALUE;
    *out = s->ctx;
    return OK;
}

API CUresult cuStreamWaitEvent(void* h, Event* e, unsigned int flags) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!events.count(e)) return E_INVALID_HANDLE;
    if (flags > 1) return E_INVALID_VALUE;
    if (e->ctx != s->ctx) return E_INVALID_HANDLE;
    if (e->captured || s->cap) return E_NOT_SUPPORTED;  // cross-stream captures are not emulated
    if (!e->recorded || e->done) return OK;
    Cmd w;
    w.wait_stream = e->stream;
    w.wait_seq = e->seq;
    return enqueue(s, std::move(w));
}

API CUresult cuEventCreate(Event** out, unsigned int flags) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!out || (flags & ~7u) || ((flags & 4) && !(flags & 2))) return E_INVALID_VALUE;
    uint32_t slot;
    if (!c->free_slots.empty()) {
        slot = c->free_slots.back();
        c->free_slots.pop_back();
    } else if (c->next_slot < MAX_EVENTS) {
        slot = c->next_slot++;
    } else {
        return E_OUT_OF_MEMORY;
    }
    Event* e = new Event();
    e->ctx = c;
    e->flags = flags;
    e->slot = slot;
    events.insert(e);
    *out = e;
    return OK;
}

API CUresult cuEventDestroy_v2(Event* e) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!events.count(e)) return E_INVALID_HANDLE;
    if (contexts.count(e->ctx)) e->ctx->free_slots.push_back(e->slot);
    events.erase(e);
    delete e;
    return OK;
}

API CUresult cuEventRecord(Event* e, void* h) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!events.count(e)) return E_INVALID_HANDLE;
    if (e->ctx != s->ctx) return E_INVALID_HANDLE;
    if (s->cap) {
        if (s->cap->invalid) return E_CAPTURE_INVALIDATED;
        e->recorded = true;
        e->captured = true;
        e->done = false;
        e->gen = 0;
        return OK;
    }
    CmdEvent ce{};
    ce.slot = e->slot;
    Cmd cmd = make_cmd(CMD_EVENT, ce);
    static uint64_t generations;
    e->gen = ++generations;  // unique across events: a record of a destroyed event matches no new one
    cmd.event = e;
    cmd.event_gen = e->gen;
    e->recorded = true;
    e->captured = false;
    e->done = false;
    e->stream = s;
    CUresult r = enqueue(s, std::move(cmd));
    e->seq = s->ctx->seq;
    return r;
}

API CUresult cuEventRecordWithFlags(Event* e, void* h, unsigned int flags) {
    if (flags > 1) return E_INVALID_VALUE;
    return cuEventRecord(e, h);
}

namespace {
CUresult event_wait(Event* e) {
    if (!e->recorded || e->done) return OK;
    if (!streams.count(e->stream)) return OK;
    return flush(e->ctx, sync_set(e->stream), e->seq);
}
}  // namespace

API CUresult cuEventSynchronize(Event* e) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!events.count(e)) return E_INVALID_HANDLE;
    if (e->ctx->sticky) return e->ctx->sticky;
    if (e->captured) return E_CAPTURED_EVENT;
    return event_wait(e);
}

API CUresult cuEventQuery(Event* e) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!events.count(e)) return E_INVALID_HANDLE;
    if (e->ctx->sticky) return e->ctx->sticky;
    if (e->captured) return E_CAPTURED_EVENT;
    if (!e->recorded || e->done) return OK;
    if (CUresult r = event_wait(e)) return r;
    return E_NOT_READY;
}

API CUresult cuEventElapsedTime(float* ms, Event* a, Event* b) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!ms) return E_INVALID_VALUE;
    if (!events.count(a) || !events.count(b)) return E_INVALID_HANDLE;
    if ((a->flags & 2) || (b->flags & 2) || !a->recorded || !b->recorded) return E_INVALID_HANDLE;
    if (a->captured || b->captured) return E_CAPTURED_EVENT;
    if (a->ctx->sticky) return a->ctx->sticky;
    if (!a->done || !b->done) return E_NOT_READY;
    *ms = (float)(((double)b->ns - (double)a->ns) / 1e6);
    return OK;
}

API CUresult cuEventElapsedTime_v2(float* ms, Event* a, Event* b) { return cuEventElapsedTime(ms, a, b); }

// =====================================================================================
// Modules and launches

namespace {

// A compiled image: the stand-in's container, or its PTX form; anything else is refused
// with the code the real driver gives for it.
CUresult parse_image(const void* image, std::vector<uint8_t>& out, ImageHeader& h, std::string& why) {
    const uint8_t* p = (const uint8_t*)image;
    if (!p) return E_INVALID_VALUE;
    if (memcmp(p, IMAGE_MAGIC, 8) == 0) {
        memcpy(&h, p, sizeof h);
        if (h.version != IMAGE_VERSION) {
            why = "a module image from another version of the stand-in";
            return E_INVALID_IMAGE;
        }
        size_t n = sizeof h + h.meta_len + h.so_len;
        out.assign(p, p + n);
        return OK;
    }
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
        uint16_t machine;
        memcpy(&machine, p + 18, 2);
        why = machine == 190 ? "a CUBIN from NVIDIA's compiler: the stand-in runs only what its own NVRTC compiled"
                             : "an ELF image that is not a module";
        return machine == 190 ? E_NO_BINARY_FOR_GPU : E_INVALID_IMAGE;
    }
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == 0xBA55ED50u || magic == 0x466243b1u) {
        why = "a fatbinary from NVIDIA's compiler: the stand-in runs only what its own NVRTC compiled";
        return E_NO_BINARY_FOR_GPU;
    }
    const char* s = (const char*)p;
    const char* b = strstr(s, "// cudasim-image-begin\n");
    if (!b) {
        why = "PTX that the stand-in cannot JIT (only its own NVRTC's output loads)";
        return E_INVALID_PTX;
    }
    b += strlen("// cudasim-image-begin\n");
    const char* e = strstr(b, "// cudasim-image-end");
    if (!e) {
        why = "truncated stand-in PTX";
        return E_INVALID_PTX;
    }
    std::string payload;
    for (const char* q = b; q < e;) {
        const char* nl = (const char*)memchr(q, '\n', (size_t)(e - q));
        if (!nl) nl = e;
        if (nl - q > 3 && q[0] == '/' && q[1] == '/' && q[2] == ' ') payload.append(q + 3, nl);
        q = nl + 1;
    }
    if (!b64decode(payload.data(), payload.size(), out) || out.size() < sizeof h || memcmp(out.data(), IMAGE_MAGIC, 8) != 0) {
        why = "damaged stand-in PTX";
        return E_INVALID_PTX;
    }
    memcpy(&h, out.data(), sizeof h);
    if (h.version != IMAGE_VERSION || sizeof h + h.meta_len + h.so_len > out.size()) {
        why = "stand-in PTX from another version of the stand-in";
        return E_INVALID_PTX;
    }
    h.flags |= IMAGE_PTX;
    return OK;
}

CUresult load_module(const void* image, Module** out) {
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!out) return E_INVALID_VALUE;
    std::vector<uint8_t> img;
    ImageHeader h;
    std::string why;
    CUresult r = parse_image(image, img, h, why);
    if (r == OK) {
        // A CUBIN runs on its own major architecture at the same or a newer minor; PTX on its
        // architecture or newer.
        if (h.flags & IMAGE_PTX) {
            if (h.arch > SM) {
                why = "PTX for compute_" + std::to_string(h.arch) + ", newer than the device (sm_90)";
                r = E_INVALID_PTX;
            }
        } else if (h.arch / 10 != SM / 10 || h.arch % 10 > SM % 10 || ((h.flags & IMAGE_ARCH_SPECIFIC) && h.arch != SM)) {
            why = "a CUBIN for sm_" + std::to_string(h.arch) + " does not run on the device (sm_90)";
            r = E_NO_BINARY_FOR_GPU;
        }
    }
    std::vector<KernelMeta> meta;
    if (r == OK && !parse_meta((const char*)img.data() + sizeof h, h.meta_len, meta)) {
        why = "damaged kernel metadata";
        r = E_INVALID_IMAGE;
    }
    if (r) {
        set_detail(r, why);
        return r;
    }
    Module* m = new Module();
    m->ctx = c;
    m->id = c->next_module++;
    m->arch = h.arch;
    m->flags = (uint32_t)h.compile_flags;
    m->meta = std::move(meta);
    Cmd cmd;
    CmdModule cm{};
    cm.module = m->id;
    cm.len = img.size();
    uint64_t dev;
    if (!stage(c, cmd, img.data(), img.size(), &dev)) {
        delete m;
        return E_OUT_OF_MEMORY;
    }
    cm.image = dev;
    Cmd body = make_cmd(CMD_MODULE_LOAD, cm);
    std::vector<uint8_t> bytes = std::move(c->maps);
    c->maps.clear();
    bytes.insert(bytes.end(), body.data.begin(), body.data.end());
    r = submit(c, bytes);
    release_staging(c, cmd);
    if (r) {
        delete m;
        return r;
    }
    for (uint32_t i = 0; i < m->meta.size(); i++) {
        auto f = std::make_unique<Function>();
        f->mod = m;
        f->index = i;
        functions.insert(f.get());
        m->funcs.push_back(std::move(f));
    }
    modules.insert(m);
    *out = m;
    return OK;
}

}  // namespace

API CUresult cuModuleLoadData(Module** out, const void* image) {
    LOCK;
    return load_module(image, out);
}

API CUresult cuModuleLoadDataEx(Module** out, const void* image, unsigned int n, int* options, void** values) {
    LOCK;
    if (n > 0 && (!options || !values)) return E_INVALID_VALUE;
    return load_module(image, out);  // JIT options have nothing to act on
}

API CUresult cuModuleLoad(Module** out, const char* path) {
    LOCK;
    if (!path) return E_INVALID_VALUE;
    FILE* f = fopen(path, "rb");
    if (!f) return 301;  // CUDA_ERROR_FILE_NOT_FOUND
    std::vector<uint8_t> b;
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
    fclose(f);
    b.push_back(0);
    return load_module(b.data(), out);
}

API CUresult cuModuleUnload(Module* m) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!modules.count(m)) return E_INVALID_HANDLE;
    Ctx* c = m->ctx;
    CUresult r = flush_all(c);  // queued launches of its kernels run first
    if (r == OK) {
        CmdModule cm{};
        cm.module = m->id;
        Cmd body = make_cmd(CMD_MODULE_UNLOAD, cm);
        std::vector<uint8_t> bytes = std::move(c->maps);
        c->maps.clear();
        bytes.insert(bytes.end(), body.data.begin(), body.data.end());
        r = submit(c, bytes);
    }
    for (auto& f : m->funcs) functions.erase(f.get());
    modules.erase(m);
    delete m;
    return r;
}

API CUresult cuModuleGetFunction(Function** out, Module* m, const char* name) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!out || !name) return E_INVALID_VALUE;
    if (!modules.count(m)) return E_INVALID_HANDLE;
    for (auto& f : m->funcs) {
        if (m->meta[f->index].name == name) {
            *out = f.get();
            return OK;
        }
    }
    return E_NOT_FOUND;
}

// __device__ and __constant__ variables set from the host are not emulated.
API CUresult cuModuleGetGlobal_v2(CUdeviceptr* p, size_t* bytes, Module* m, const char* name) {
    LOCK;
    (void)p;
    (void)bytes;
    (void)name;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!modules.count(m)) return E_INVALID_HANDLE;
    return E_NOT_FOUND;
}

API CUresult cuFuncGetAttribute(int* v, int attr, Function* f) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!functions.count(f)) return E_INVALID_HANDLE;
    if (!v) return E_INVALID_VALUE;
    const KernelMeta& k = f->mod->meta[f->index];
    switch (attr) {
        case 0: *v = k.max_threads ? (int)std::min<uint32_t>(k.max_threads, 1024) : 1024; return OK;  // MAX_THREADS_PER_BLOCK
        case 1: *v = 0; return OK;      // SHARED_SIZE_BYTES: not measured here (NVRTC's ptxas report has it)
        case 2: *v = 0; return OK;      // CONST_SIZE_BYTES
        case 3: *v = 0; return OK;      // LOCAL_SIZE_BYTES
        case 4: *v = 32; return OK;     // NUM_REGS: a placeholder, not measured
        case 5: *v = (int)f->mod->arch; return OK;  // PTX_VERSION
        case 6: *v = (int)f->mod->arch; return OK;  // BINARY_VERSION
        case 7: *v = 0; return OK;      // CACHE_MODE_CA
        case 8: *v = f->max_dyn; return OK;  // MAX_DYNAMIC_SHARED_SIZE_BYTES
        case 9: *v = f->carveout; return OK;  // PREFERRED_SHARED_MEMORY_CARVEOUT
        case 10: case 11: case 12: case 13: case 14: case 15: *v = 0; return OK;  // clusters
    }
    return E_INVALID_VALUE;
}

API CUresult cuFuncSetAttribute(Function* f, int attr, int value) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!functions.count(f)) return E_INVALID_HANDLE;
    switch (attr) {
        case 8:
            if (value < 0 || value > MAX_SHARED_OPTIN) return E_INVALID_VALUE;
            f->max_dyn = value;
            return OK;
        case 9:
            if (value < -1 || value > 100) return E_INVALID_VALUE;
            f->carveout = value;
            return OK;
    }
    return E_INVALID_VALUE;
}

API CUresult cuFuncSetCacheConfig(Function* f, int config) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!functions.count(f)) return E_INVALID_HANDLE;
    return config >= 0 && config <= 3 ? OK : E_INVALID_VALUE;
}

API CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                            void* stream, void** params, void** extra) {
    LOCK;
    Ctx* c;
    if (CUresult r = need_ctx(&c)) return r;
    if (!functions.count(f)) return E_INVALID_HANDLE;
    if (f->mod->ctx != c) return E_INVALID_HANDLE;
    Stream* s;
    if (CUresult r = get_stream(stream, &s)) return r;
    if (s->ctx != c) return E_INVALID_HANDLE;
    const KernelMeta& k = f->mod->meta[f->index];
    if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647u || gy > 65535 || gz > 65535) return E_INVALID_VALUE;
    if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024) return E_INVALID_VALUE;
    if (k.max_threads && (uint64_t)bx * by * bz > k.max_threads) {
        set_detail(E_LAUNCH_OUT_OF_RESOURCES, "kernel " + k.name + " launched with " + std::to_string(bx * by * bz) +
                                                  " threads, more than its __launch_bounds__(" + std::to_string(k.max_threads) + ")");
        return E_LAUNCH_OUT_OF_RESOURCES;
    }
    if ((int)shared > f->max_dyn || shared > (unsigned)MAX_SHARED_OPTIN) {
        set_detail(E_INVALID_VALUE, "kernel " + k.name + " launched with " + std::to_string(shared) +
                                        " bytes of dynamic shared memory, above its limit of " + std::to_string(f->max_dyn) +
                                        " (raise it with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))");
        return E_INVALID_VALUE;
    }
    std::vector<uint8_t> blob(k.param_bytes);
    if (params && extra) return E_INVALID_VALUE;
    if (extra) {
        void* buf = nullptr;
        size_t* size = nullptr;
        for (void** e = extra; *e; e += 2) {
            if (*e == (void*)1) buf = e[1];
            else if (*e == (void*)2) size = (size_t*)e[1];
            else return E_INVALID_VALUE;
        }
        if (!buf || !size || *size != k.param_bytes) return E_INVALID_VALUE;
        memcpy(blob.data(), buf, k.param_bytes);
    } else {
        if (!k.size.empty() && !params) return E_INVALID_VALUE;
        for (size_t i = 0; i < k.size.size(); i++) {
            if (!params[i]) return E_INVALID_VALUE;
            memcpy(blob.data() + k.offset[i], params[i], k.size[i]);
        }
    }
    if (k.param_bytes > 32764) return E_INVALID_VALUE;
    CmdLaunch cl{};
    cl.module = f->mod->id;
    cl.kernel = f->index;
    cl.grid[0] = gx;
    cl.grid[1] = gy;
    cl.grid[2] = gz;
    cl.block[0] = bx;
    cl.block[1] = by;
    cl.block[2] = bz;
    cl.shared = shared;
    cl.flags = f->mod->flags & LAUNCH_FTZ;
    cl.param_bytes = k.param_bytes;
    return enqueue(s, make_cmd(CMD_LAUNCH, cl, blob.data(), blob.size()));
}

// =====================================================================================
// Graphs

API CUresult cuStreamBeginCapture_v2(void* h, int mode) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if ((uintptr_t)h == 0 || (uintptr_t)h == 1) return E_CAPTURE_UNSUPPORTED;  // not the legacy stream
    STREAM_OR_RETURN(h, s);
    if (mode < 0 || mode > 2) return E_INVALID_VALUE;
    if (s->cap) return E_ILLEGAL_STATE;
    s->cap = std::make_unique<Capture>();
    s->cap->mode = mode;
    s->cap->thread = thread_id();
    return OK;
}

API CUresult cuStreamBeginCapture(void* h) { return cuStreamBeginCapture_v2(h, 0); }

API CUresult cuStreamEndCapture(void* h, Graph** out) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!out) return E_INVALID_VALUE;
    if (!s->cap) return E_ILLEGAL_STATE;
    if (s->cap->mode != 2 && s->cap->thread != thread_id()) return E_CAPTURE_WRONG_THREAD;
    std::unique_ptr<Capture> cap = std::move(s->cap);
    if (cap->invalid) {
        *out = nullptr;
        return E_CAPTURE_INVALIDATED;
    }
    Graph* g = new Graph();
    g->ctx = s->ctx;
    g->cmds = std::move(cap->cmds);
    graphs.insert(g);
    *out = g;
    return OK;
}

API CUresult cuStreamIsCapturing(void* h, int* status) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!status) return E_INVALID_VALUE;
    *status = !s->cap ? 0 : s->cap->invalid ? 2 : 1;
    return OK;
}

API CUresult cuGraphInstantiateWithFlags(Graph** out, Graph* g, unsigned long long flags) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!out) return E_INVALID_VALUE;
    if (!graphs.count(g)) return E_INVALID_HANDLE;
    if (flags & ~(1ull | 8ull)) return flags & 4 ? E_NOT_SUPPORTED : E_INVALID_VALUE;
    Graph* e = new Graph();
    e->ctx = g->ctx;
    e->cmds = g->cmds;
    execs.insert(e);
    *out = e;
    return OK;
}

API CUresult cuGraphInstantiate_v2(Graph** out, Graph* g, void** error_node, char* log, size_t log_size) {
    if (error_node) *error_node = nullptr;
    if (log && log_size) log[0] = 0;
    return cuGraphInstantiateWithFlags(out, g, 0);
}

API CUresult cuGraphInstantiate(Graph** out, Graph* g, void** error_node, char* log, size_t log_size) {
    return cuGraphInstantiate_v2(out, g, error_node, log, log_size);
}

API CUresult cuGraphLaunch(Graph* e, void* h) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    if (!execs.count(e)) return E_INVALID_HANDLE;
    if (e->ctx != s->ctx) return E_INVALID_HANDLE;
    if (s->cap) return E_CAPTURE_UNSUPPORTED;
    for (const Cmd& cmd : e->cmds) {
        Cmd copy;
        copy.data = cmd.data;
        if (CUresult r = enqueue(s, std::move(copy))) return r;
    }
    return OK;
}

API CUresult cuGraphUpload(Graph* e, void* h) {
    LOCK;
    STREAM_OR_RETURN(h, s);
    return execs.count(e) ? OK : E_INVALID_HANDLE;
}

API CUresult cuGraphExecDestroy(Graph* e) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!execs.count(e)) return E_INVALID_HANDLE;
    execs.erase(e);
    delete e;
    return OK;
}

API CUresult cuGraphDestroy(Graph* g) {
    LOCK;
    if (!initialized) return E_NOT_INITIALIZED;
    if (!graphs.count(g)) return E_INVALID_HANDLE;
    graphs.erase(g);
    delete g;
    return OK;
}

// =====================================================================================
// For the stand-in's cuBLAS (libcublas.so.12 links against this library).

// The context cuBLAS works in: the current one, else the primary context (retained), as the
// runtime library cuBLAS sits on would bind.
API int cudasim_blas_context(void** out, int* retained) {
    LOCK;
    *retained = 0;
    if (!initialized)
        if (CUresult r = cuInit(0)) return r;
    Ctx* c = current();
    if (!c) {
        if (CUresult r = cuDevicePrimaryCtxRetain(&c, 0)) return r;
        *retained = 1;
    }
    *out = c;
    return c->sticky;
}

API int cudasim_blas_release(void* ctx, int retained) {
    LOCK;
    if (retained && contexts.count((Ctx*)ctx)) return cuDevicePrimaryCtxRelease_v2(0);
    return OK;
}

// Queues a GEMM command on stream (0: the legacy stream of ctx).
API int cudasim_blas_enqueue(void* ctx, void* stream, const void* cmd, size_t len) {
    LOCK;
    Ctx* c = (Ctx*)ctx;
    if (!contexts.count(c)) return E_INVALID_CONTEXT;
    if (c->sticky) return c->sticky;
    Stream* s = c->legacy;
    if ((uintptr_t)stream > 2) {
        s = (Stream*)stream;
        if (!streams.count(s) || s->ctx != c) return E_INVALID_HANDLE;
    }
    Cmd body;
    body.data.assign((const uint8_t*)cmd, (const uint8_t*)cmd + len);
    return enqueue(s, std::move(body));
}

API int cudasim_blas_valid_stream(void* ctx, void* stream) {
    LOCK;
    if ((uintptr_t)stream <= 2) return 1;
    Stream* s = (Stream*)stream;
    return streams.count(s) && s->ctx == (Ctx*)ctx;
}
