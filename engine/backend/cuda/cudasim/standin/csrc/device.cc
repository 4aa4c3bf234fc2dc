// cudasim-device: the process that holds a context's device memory and runs its work.
//
// libcuda.so.1 starts one per context and hands it a batch of commands at each
// synchronisation point. Kernels run here: each CUDA thread is a fiber with its own stack and
// a hand-written context switch; a block's threads first run one after another on one stack
// (the plain loop) and become fibers only when one of them waits at a barrier or a warp
// collective. A fault (a read or write outside device memory, a stack overflow) ends the
// process after writing what happened for libcuda, as a GPU fault ends its context.
#include "device.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernel_abi.h"

extern "C" void cudasim_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl cudasim_switch
    .hidden cudasim_switch
    .type cudasim_switch,@function
cudasim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudasim_switch, .-cudasim_switch
)");

namespace cudasim {
namespace {

Control* ctl;
uint64_t devbase;
uint64_t alias;  // the user's process' view of the same memory; pinned host memory is mapped there too
uint32_t batch_req;  // the request being served (the fault handler acknowledges it)
size_t stack_size = 64 << 10;
constexpr uint32_t MAX_THREADS = 1024;
constexpr uint32_t MAX_DYN_SHARED = 232448;  // sm_90's opt-in limit

long futex(void* addr, int op, uint32_t val, const struct timespec* ts = nullptr) {
    return syscall(SYS_futex, addr, op, val, ts, nullptr, 0);
}

[[noreturn]] void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudasim-device: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    _exit(2);
}

// ---- device memory bookkeeping (for messages and end-of-buffer checks) ----

struct Region {
    uint64_t addr, len, data, data_len;
    uint32_t kind;
};
std::map<uint64_t, Region> live;  // by addr
std::deque<Region> freed;          // the most recent frees, for use-after-free messages
struct Canary {
    uint64_t lo, hi;  // bytes that must keep the fill value 0xFF
    uint64_t data, data_len;
};
std::vector<Canary> canaries;

const char* kind_name(uint32_t k) { return k == 0 ? "device allocation" : k == 1 ? "pinned host allocation" : "staging area"; }

void rebuild_canaries() {
    canaries.clear();
    for (auto& [a, r] : live) {
        if (r.kind != 0) continue;
        Canary c{0, 0, r.data, r.data_len};
        uint64_t end = r.data + r.data_len, pend = r.addr + r.len;
        uint64_t lo = r.data >= r.addr + 16 ? r.data - 16 : r.addr;
        if (lo < r.data || end < pend) {
            c.lo = lo;
            c.hi = std::min(pend, end + 256);
            canaries.push_back(c);
        }
    }
}

// Checks the bytes around each allocation (at most 16 before, 255 after); returns a message
// when a kernel wrote there.
bool check_canaries(std::string& msg) {
    static const uint8_t ff[512] = {
#define F16 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
#define F128 F16, F16, F16, F16, F16, F16, F16, F16
        F128, F128, F128, F128
#undef F128
#undef F16
    };
    for (const Canary& c : canaries) {
        uint64_t end = c.data + c.data_len;
        uint64_t ranges[2][2] = {{c.lo, std::min(c.data, c.hi)}, {std::max(end, c.lo), c.hi}};
        for (auto& r : ranges) {
            if (r[1] <= r[0] || memcmp((const void*)r[0], ff, r[1] - r[0]) == 0) continue;
            uint64_t a = r[0];
            while (*(const uint8_t*)a == 0xFF) a++;
            char b[256];
            if (a < c.data)
                snprintf(b, sizeof b, "a write %llu bytes before the start of the %llu-byte allocation at %#llx",
                         (unsigned long long)(c.data - a), (unsigned long long)c.data_len, (unsigned long long)c.data);
            else
                snprintf(b, sizeof b, "a write %llu bytes past the end of the %llu-byte allocation at %#llx (byte %#llx)",
                         (unsigned long long)(a - end), (unsigned long long)c.data_len, (unsigned long long)c.data,
                         (unsigned long long)a);
            msg = b;
            return false;
        }
    }
    return true;
}

std::string describe_address(uint64_t a) {
    char b[512];
    if (a < 65536) {
        snprintf(b, sizeof b, "address %#llx: a null pointer", (unsigned long long)a);
        return b;
    }
    if (alias && a >= alias && a < alias + DEV_SPACE) {
        snprintf(b, sizeof b, "address %#llx is in the host's view of device memory, not pinned host memory", (unsigned long long)a);
        return b;
    }
    if (a < devbase || a >= devbase + DEV_SPACE) {
        snprintf(b, sizeof b, "address %#llx is not device memory (a host pointer passed to the device?)", (unsigned long long)a);
        return b;
    }
    for (auto it = freed.rbegin(); it != freed.rend(); ++it) {
        if (a >= it->addr && a < it->addr + it->len) {
            snprintf(b, sizeof b, "address %#llx is in a %s of %llu bytes at %#llx that was freed", (unsigned long long)a,
                     kind_name(it->kind), (unsigned long long)it->data_len, (unsigned long long)it->data);
            return b;
        }
    }
    auto it = live.upper_bound(a);
    const Region* above = it == live.end() ? nullptr : &it->second;
    const Region* below = it == live.begin() ? nullptr : &std::prev(it)->second;
    if (below && a >= below->data + below->data_len && (!above || a - (below->data + below->data_len) < above->data - a)) {
        snprintf(b, sizeof b, "address %#llx is %llu bytes past the end of the %s of %llu bytes at %#llx", (unsigned long long)a,
                 (unsigned long long)(a - below->data - below->data_len), kind_name(below->kind), (unsigned long long)below->data_len,
                 (unsigned long long)below->data);
        return b;
    }
    if (above && a < above->data) {
        snprintf(b, sizeof b, "address %#llx is %llu bytes before the start of the %s of %llu bytes at %#llx", (unsigned long long)a,
                 (unsigned long long)(above->data - a), kind_name(above->kind), (unsigned long long)above->data_len,
                 (unsigned long long)above->data);
        return b;
    }
    snprintf(b, sizeof b, "address %#llx is not allocated device memory", (unsigned long long)a);
    return b;
}

// ---- kernels ----

struct Instance {
    void* dl = nullptr;
    int fd = -1;
    Vars* vars = nullptr;
    char *shlo = nullptr, *shhi = nullptr;
    std::vector<void (*)(const char*)> entry;
};

struct Module {
    uint32_t id;
    uint32_t flags;
    std::vector<KernelMeta> meta;
    std::vector<Instance> inst;  // one per worker
    ~Module() {
        for (Instance& i : inst) {
            if (i.dl) dlclose(i.dl);
            if (i.fd >= 0) close(i.fd);
        }
    }
};
std::unordered_map<uint32_t, std::unique_ptr<Module>> modules;

// CUDASIM_PROFILE=1: time per kernel and per cuBLAS shape, printed when the device process ends.
struct Prof {
    uint64_t ns = 0, calls = 0, threads = 0;
};
bool profiling;
std::map<std::string, Prof> profile;
uint64_t batches, batch_ns;

uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char* profile_path;  // CUDASIM_PROFILE names a file to append to, or is 1 for stderr

void print_profile() {
    if (!profiling || profile.empty()) return;
    FILE* out = stderr;
    if (profile_path && (out = fopen(profile_path, "a")) == nullptr) out = stderr;
    std::vector<std::pair<std::string, Prof>> v(profile.begin(), profile.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ns > b.second.ns; });
    uint64_t total = 0;
    for (auto& e : v) total += e.second.ns;
    fprintf(out, "cudasim profile (device process %d): %.3f s in kernels, GEMMs and copies; %llu batches took %.3f s\n", getpid(),
            total / 1e9, (unsigned long long)batches, batch_ns / 1e9);
    fprintf(out, "%10s %6s %9s %10s %s\n", "ms", "%", "calls", "ns/thread", "what");
    for (auto& [name, p] : v)
        fprintf(out, "%10.1f %6.1f %9llu %10.1f %s\n", p.ns / 1e6, 100.0 * p.ns / (double)(total ? total : 1),
                (unsigned long long)p.calls, p.threads ? (double)p.ns / (double)p.threads : 0.0, name.c_str());
    if (out != stderr) fclose(out);
}

struct Launch {
    Module* mod;
    uint32_t kernel;
    const KernelMeta* meta;
    uint32_t grid[3], block[3];
    uint32_t shared, flags;
    const char* params;
    uint64_t nblocks;
    uint32_t nthreads;
    uint64_t gen;
    std::vector<Thread> threads;   // in order of the linear thread index
    std::vector<Thread> reversed;  // the other order a block may run its threads in
    std::atomic<int> failed{0};
    int code = 0;
    std::string err;
};

enum : uint8_t { F_INIT, F_RUN, F_BAR, F_WARP, F_DONE };

struct Fiber {
    void* sp = nullptr;
    char* top = nullptr;  // stack
    uint8_t state = F_INIT;
    uint32_t arg = 0;
    int32_t width = 0;
    uint64_t value = 0, result = 0;
};

// A warp collective waiting for its lanes: lanes that call the same kind with the same mask
// meet (as on sm_70 and later, wherever the calls are); others form their own group.
struct Group {
    uint32_t kind, mask, arrived;
};

struct Warp {
    uint32_t exited;  // lanes that returned, or that the block does not have
    uint32_t ngroups;
    Group g[32];
};

struct Worker {
    int id;
    void* main_sp = nullptr;
    Fiber fib[MAX_THREADS];
    char* loop_top = nullptr;
    Warp warp[MAX_THREADS / 32];
    uint32_t n = 0, cur = 0, done = 0, first_exit = 0;
    uint32_t bar_arrived = 0, bar_op = 0;
    int bar_acc = 0, bar_result = 0;
    uint16_t queue[MAX_THREADS];
    uint32_t qhead = 0, qsize = 0;
    bool converted = false, in_block = false;
    Launch* L = nullptr;
    const Thread* order = nullptr;  // the block's threads by position (fiber index)
    bool rev = false;                // order is the reversed one
    Instance* inst = nullptr;
    Vars* vars = nullptr;
    void (*entry)(const char*) = nullptr;
    uint64_t gen = 0;
    uint3 block{};
    int err_code = 0;
    char err[4096];
    char* dyn_end = nullptr;  // the guard page after the dynamic shared buffer
    std::vector<std::pair<char*, char*>> guards;  // stack guard pages
    const char* activity = "idle";
};

std::vector<Worker*> all_workers;
thread_local Worker* tls_worker;

char* map_stack(Worker* w, size_t size) {
    char* p = (char*)mmap(nullptr, size + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot map a fiber stack: %s", strerror(errno));
    mprotect(p, PAGE, PROT_NONE);
    w->guards.push_back({p, p + PAGE});
    return p + PAGE + size;
}

void* init_frame(char* top);

// The switch's pops take 6 registers, then `ret` enters fiber_main as if called.
void fiber_main();
void* init_frame(char* top) {
    uintptr_t t = (uintptr_t)top & ~(uintptr_t)15;
    void** sp = (void**)(t - 64);
    for (int i = 0; i < 6; i++) sp[i] = nullptr;
    sp[6] = (void*)&fiber_main;
    sp[7] = nullptr;
    return sp;
}

// Positions are fiber indices; a block runs its threads in the order of w->order, which is
// reversed in every other block (see run_block).
uint32_t thread_index(Worker* w) { return w->vars && w->vars->plain ? w->vars->next : w->cur; }
inline uint32_t pos_of(Worker* w, uint32_t linear) { return w->rev ? w->n - 1 - linear : linear; }

[[noreturn]] void leave_block(Worker* w) {
    void* dummy;
    cudasim_switch(&dummy, w->main_sp);
    __builtin_unreachable();
}

[[noreturn]] void fail_block(Worker* w, int code, const char* what) {
    const Thread& t = w->order[thread_index(w)];
    w->err_code = code;
    snprintf(w->err, sizeof w->err, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s", w->L->meta->name.c_str(), w->block.x,
             w->block.y, w->block.z, t.idx.x, t.idx.y, t.idx.z, what);
    leave_block(w);
}

[[noreturn]] void failf(Worker* w, int code, const char* fmt, ...) {
    char b[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    fail_block(w, code, b);
}

const char* op_name(uint32_t kind) {
    static const char* n[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp"};
    return kind < 8 ? n[kind] : "?";
}

std::string lanes_str(uint32_t m) {
    std::string s;
    for (int i = 0; i < 32;) {
        if (!(m >> i & 1)) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < 32 && (m >> (j + 1) & 1)) j++;
        if (!s.empty()) s += ",";
        s += std::to_string(i);
        if (j > i) s += "-" + std::to_string(j);
        i = j + 1;
    }
    return s.empty() ? "none" : s;
}

// Nothing can run: say who waits where.
[[noreturn]] void deadlock(Worker* w) {
    std::string s = "threads wait for each other (a barrier or warp collective in divergent code):";
    uint32_t at_bar = 0;
    for (uint32_t j = 0; j < w->n; j++) at_bar += w->fib[j].state == F_BAR;
    if (at_bar) s += " " + std::to_string(at_bar) + " threads wait at __syncthreads();";
    for (uint32_t wi = 0; wi < (w->n + 31) / 32; wi++) {
        Warp& wp = w->warp[wi];
        for (uint32_t gi = 0; gi < wp.ngroups; gi++) {
            Group& g = wp.g[gi];
            uint32_t missing = g.mask & ~wp.exited & ~g.arrived, barm = 0;
            for (int l = 0; l < 32; l++)
                if ((missing >> l & 1) && w->fib[pos_of(w, wi * 32 + l)].state == F_BAR) barm |= 1u << l;
            char b[512];
            snprintf(b, sizeof b, " in warp %u lanes %s wait at %s(mask %#x) for lanes %s", wi, lanes_str(g.arrived).c_str(),
                     op_name(g.kind), g.mask, lanes_str(missing).c_str());
            s += b;
            if (barm) s += " (lanes " + lanes_str(barm) + " wait at __syncthreads())";
            s += ";";
        }
    }
    s.pop_back();
    fail_block(w, 719, s.c_str());
}

inline void push(Worker* w, uint32_t j) {
    w->queue[(w->qhead + w->qsize) & (MAX_THREADS - 1)] = (uint16_t)j;
    w->qsize++;
}

void switch_to(Worker* w, uint32_t j) {
    Fiber& me = w->fib[w->cur];
    Fiber& f = w->fib[j];
    void* to;
    if (f.state == F_INIT) {
        if (!f.top) f.top = map_stack(w, stack_size);
        to = init_frame(f.top);
        f.state = F_RUN;
    } else {
        to = f.sp;
    }
    w->cur = j;
    w->vars->cur = &w->order[j];
    cudasim_switch(&me.sp, to);
}

// The current thread waits (its state already says where): run the next runnable one.
void wait_here(Worker* w) {
    if (w->qsize == 0) deadlock(w);
    uint32_t j = w->queue[w->qhead & (MAX_THREADS - 1)];
    w->qhead++;
    w->qsize--;
    switch_to(w, j);
}

// The first wait of a block in the plain loop: threads before the current one have
// finished, the current one waits, those after it have not started.
void convert(Worker* w) {
    Vars* v = w->vars;
    uint32_t i = v->next;
    v->plain = 0;
    w->converted = true;
    w->cur = i;
    std::swap(w->fib[i].top, w->loop_top);
    if (!w->loop_top) w->loop_top = map_stack(w, stack_size);
    for (uint32_t j = 0; j < i; j++) w->fib[j].state = F_DONE;
    w->done = i;
    w->first_exit = i ? 1 : 0;  // thread 0 finished first
    w->fib[i].state = F_RUN;
    for (uint32_t j = i + 1; j < w->n; j++) {
        w->fib[j].state = F_INIT;
        push(w, j);
    }
    for (uint32_t wi = 0; wi < (w->n + 31) / 32; wi++) {
        Warp& wp = w->warp[wi];
        wp.ngroups = 0;
        uint32_t lanes = std::min(32u, w->n - wi * 32);
        wp.exited = lanes == 32 ? 0 : ~((1u << lanes) - 1);
    }
    for (uint32_t j = 0; j < i; j++) w->warp[w->order[j].warp].exited |= 1u << w->order[j].lane;
    w->bar_arrived = 0;
}

bool group_complete(const Warp& wp, const Group& g) {
    uint32_t need = g.mask & ~wp.exited;
    return (g.arrived & need) == need;
}

// Every lane group gi of warp wi needs has arrived: compute each one's result, make the
// waiting ones runnable (the caller, if it arrived, goes on by itself) and drop the group.
void release_group(Worker* w, uint32_t wi, uint32_t gi) {
    Warp& wp = w->warp[wi];
    Group g = wp.g[gi];
    wp.g[gi] = wp.g[--wp.ngroups];
    uint32_t arr = g.arrived;
    uint32_t base = wi * 32;
    if (g.kind <= SHFL_BFLY) {
        for (uint32_t l = 0; l < 32; l++) {
            if (!(arr >> l & 1)) continue;
            Fiber& f = w->fib[pos_of(w, base + l)];
            uint32_t width = (uint32_t)f.width, lo = l & (width - 1), src = l;
            switch (g.kind) {
                case SHFL_IDX: src = (l & ~(width - 1)) | (f.arg & (width - 1)); break;
                case SHFL_UP: src = lo >= f.arg ? l - f.arg : l; break;
                case SHFL_DOWN: src = (uint64_t)lo + f.arg < width ? l + f.arg : l; break;
                case SHFL_BFLY: src = l ^ f.arg; if (src >= (l | (width - 1)) + 1) src = l; break;
            }
            if (src == l) {
                f.result = f.value;
            } else if (arr >> src & 1) {
                f.result = w->fib[pos_of(w, base + src)].value;
            } else {
                const char* why = !(g.mask >> src & 1) ? "which is not in the mask"
                                  : base + src >= w->n ? "which does not exist (the block's last warp is partial)"
                                                       : "which has exited";
                failf(w, 719, "%s(mask %#x): lane %u of warp %u reads lane %u, %s", op_name(g.kind), g.mask, l, wi, src, why);
            }
        }
    } else if (g.kind != SYNCWARP) {
        uint32_t ballot = 0;
        for (uint32_t l = 0; l < 32; l++)
            if ((arr >> l & 1) && w->fib[pos_of(w, base + l)].value) ballot |= 1u << l;
        uint64_t r = g.kind == VOTE_BALLOT ? ballot : g.kind == VOTE_ANY ? ballot != 0 : ballot == arr;
        for (uint32_t l = 0; l < 32; l++)
            if (arr >> l & 1) w->fib[pos_of(w, base + l)].result = r;
    }
    for (uint32_t l = 0; l < 32; l++) {
        if (!(arr >> l & 1)) continue;
        uint32_t j = pos_of(w, base + l);
        if (j != w->cur && w->fib[j].state == F_WARP) {
            w->fib[j].state = F_RUN;
            push(w, j);
        }
    }
}

void warp_arrive(Worker* w, int kind, uint32_t mask) {
    uint32_t me = w->cur, lane = w->order[me].lane, wi = w->order[me].warp;
    if (!(mask >> lane & 1)) failf(w, 719, "%s with mask %#x, which does not include the calling lane %u", op_name(kind), mask, lane);
    Warp& wp = w->warp[wi];
    uint32_t gi = 0;
    while (gi < wp.ngroups && !(wp.g[gi].kind == (uint32_t)kind && wp.g[gi].mask == mask)) gi++;
    if (gi == wp.ngroups) wp.g[wp.ngroups++] = Group{(uint32_t)kind, mask, 0};
    wp.g[gi].arrived |= 1u << lane;
    if (group_complete(wp, wp.g[gi])) {
        release_group(w, wi, gi);
    } else {
        w->fib[me].state = F_WARP;
        wait_here(w);
    }
}

uint64_t rt_shfl(int kind, uint32_t mask, uint64_t value, uint32_t arg, int width) {
    Worker* w = tls_worker;
    if (w->vars->plain) convert(w);
    if (width < 1 || width > 32 || (width & (width - 1)))
        failf(w, 719, "%s with width %d (a power of 2 from 1 to 32 is needed)", op_name(kind), width);
    Fiber& f = w->fib[w->cur];
    f.value = value;
    f.arg = arg;
    f.width = width;
    warp_arrive(w, kind, mask);
    return w->fib[w->cur].result;
}

uint32_t rt_vote(int kind, uint32_t mask, int pred) {
    Worker* w = tls_worker;
    if (w->vars->plain) convert(w);
    w->fib[w->cur].value = pred != 0;
    warp_arrive(w, kind, mask);
    return (uint32_t)w->fib[w->cur].result;
}

void rt_syncwarp(uint32_t mask) {
    Worker* w = tls_worker;
    if (w->vars->plain) convert(w);
    warp_arrive(w, SYNCWARP, mask);
}

int rt_barrier(int op, int pred) {
    Worker* w = tls_worker;
    if (w->vars->plain) convert(w);
    uint32_t me = w->cur;
    if (w->first_exit) {
        const Thread& t = w->order[w->first_exit - 1];
        failf(w, 719, "__syncthreads() reached after thread (%u,%u,%u) of the block exited (a barrier in divergent code)", t.idx.x,
              t.idx.y, t.idx.z);
    }
    if (w->bar_arrived == 0) {
        w->bar_op = op;
        w->bar_acc = op == BAR_AND ? 1 : 0;
    } else if (w->bar_op != (uint32_t)op) {
        failf(w, 719, "threads of the block wait at different kinds of __syncthreads (%d and %d)", w->bar_op, op);
    }
    if (op == BAR_COUNT) w->bar_acc += pred;
    if (op == BAR_AND) w->bar_acc &= pred;
    if (op == BAR_OR) w->bar_acc |= pred;
    if (++w->bar_arrived == w->n) {
        w->bar_arrived = 0;
        w->bar_result = w->bar_acc;
        for (uint32_t j = 0; j < w->n; j++) {
            if (w->fib[j].state == F_BAR) {
                w->fib[j].state = F_RUN;
                push(w, j);
            }
        }
        return w->bar_result;
    }
    w->fib[me].state = F_BAR;
    wait_here(w);
    return w->bar_result;
}

// A thread's kernel function returned.
[[noreturn]] void thread_exit(Worker* w) {
    if (!w->converted) leave_block(w);  // the plain loop ran every thread
    uint32_t me = w->cur;
    w->fib[me].state = F_DONE;
    w->done++;
    if (!w->first_exit) w->first_exit = me + 1;
    if (w->bar_arrived) {
        failf(w, 719, "the thread exited while %u threads of its block wait at __syncthreads() (a barrier in divergent code)",
              w->bar_arrived);
    }
    uint32_t wi = w->order[me].warp;
    Warp& wp = w->warp[wi];
    wp.exited |= 1u << w->order[me].lane;
    for (uint32_t gi = 0; gi < wp.ngroups;) {
        if (group_complete(wp, wp.g[gi]))
            release_group(w, wi, gi);  // moves the last group into gi
        else
            gi++;
    }
    if (w->done == w->n) leave_block(w);
    if (w->qsize == 0) deadlock(w);
    uint32_t j = w->queue[w->qhead & (MAX_THREADS - 1)];
    w->qhead++;
    w->qsize--;
    switch_to(w, j);
    __builtin_unreachable();
}

void fiber_main() {
    Worker* w = tls_worker;
    w->entry(w->L->params);
    thread_exit(w);
}

[[noreturn]] void rt_fail(int code, const char* what) { fail_block(tls_worker, code, what); }

const Runtime runtime = {rt_barrier, rt_shfl, rt_vote, rt_syncwarp, rt_fail};

// Runs block b of L on worker w; false when it failed.
bool run_block(Worker* w, Launch& L, uint64_t b) {
    Instance& in = L.mod->inst[w->id];
    Vars* v = in.vars;
    if (w->gen != L.gen) {
        w->gen = L.gen;
        w->L = &L;
        w->inst = &in;
        w->vars = v;
        w->entry = in.entry[L.kernel];
        v->block_dim = dim3(L.block[0], L.block[1], L.block[2]);
        v->grid_dim = dim3(L.grid[0], L.grid[1], L.grid[2]);
        v->rt = &runtime;
        v->dyn_size = L.shared;
        v->dyn_shared = w->dyn_end - ((L.shared + 15) & ~15u);
        // Shared memory starts as NaN bytes at each launch (a GPU leaves it undefined).
        if (in.shhi > in.shlo) memset(in.shlo, 0xFF, in.shhi - in.shlo);
        memset(v->dyn_shared, 0xFF, (L.shared + 15) & ~15u);
        if (!w->loop_top) w->loop_top = map_stack(w, stack_size);
    }
    uint64_t gx = L.grid[0], gy = L.grid[1];
    w->block = uint3{(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / (gx * gy))};
    v->block_idx = w->block;
    // Every other block runs its threads last to first: a race on shared memory (a read
    // without the barrier that orders it after the write) shows in one order or the other.
    w->rev = L.nthreads > 1 && ((b + L.gen) & 1);
    w->order = w->rev ? L.reversed.data() : L.threads.data();
    v->threads = w->order;
    v->plain = 1;
    v->next = 0;
    v->count = L.nthreads;
    v->cur = &w->order[0];
    w->n = L.nthreads;
    w->converted = false;
    w->qhead = w->qsize = 0;
    w->done = w->first_exit = w->bar_arrived = 0;
    w->err_code = 0;
    w->in_block = true;
    cudasim_switch(&w->main_sp, init_frame(w->loop_top));
    w->in_block = false;
    if (w->err_code) {
        if (!L.failed.exchange(1)) {
            L.code = w->err_code;
            L.err = w->err;
        }
        return false;
    }
    return true;
}

struct LaunchJob : Job {
    Launch* L;
    bool work(int worker, int64_t b) override { return !L->failed.load(std::memory_order_relaxed) && run_block(all_workers[worker], *L, b); }
};

uint64_t launch_gen;

bool run_launch(const CmdLaunch* c, int& code, std::string& err) {
    auto it = modules.find(c->module);
    if (it == modules.end()) {
        code = 400;
        err = "a kernel of a module that is no longer loaded was launched";
        return false;
    }
    Module* m = it->second.get();
    if (c->kernel >= m->meta.size()) {
        code = 400;
        err = "no such kernel in its module";
        return false;
    }
    Launch L;
    L.mod = m;
    L.kernel = c->kernel;
    L.meta = &m->meta[c->kernel];
    memcpy(L.grid, c->grid, sizeof L.grid);
    memcpy(L.block, c->block, sizeof L.block);
    L.shared = c->shared;
    L.flags = c->flags;
    L.params = (const char*)(c + 1);
    L.nblocks = (uint64_t)c->grid[0] * c->grid[1] * c->grid[2];
    L.nthreads = c->block[0] * c->block[1] * c->block[2];
    L.gen = ++launch_gen;
    L.threads.resize(L.nthreads);
    for (uint32_t i = 0; i < L.nthreads; i++) {
        Thread& t = L.threads[i];
        t.idx = uint3{i % c->block[0], i / c->block[0] % c->block[1], i / (c->block[0] * c->block[1])};
        t.lane = i & 31;
        t.warp = i >> 5;
        t.linear = i;
        t.pad = 0;
    }
    L.reversed.assign(L.threads.rbegin(), L.threads.rend());
    char act[256];
    snprintf(act, sizeof act, "kernel %s", L.meta->name.c_str());
    set_activity(act);
    unsigned csr = _mm_getcsr();
    LaunchJob job;
    job.L = &L;
    int64_t chunk = std::max<int64_t>(1, (int64_t)(L.nblocks / (uint64_t)(workers() * 16)));
    // Denormals flush to zero for modules compiled with --ftz=true or --use_fast_math.
    struct Ftz : Job {
        Job* inner;
        uint32_t flags;
        bool work(int worker, int64_t t) override {
            unsigned old = _mm_getcsr();
            if (flags & LAUNCH_FTZ) _mm_setcsr(old | 0x8040);
            bool ok = inner->work(worker, t);
            _mm_setcsr(old);
            return ok;
        }
    } ftz;
    ftz.inner = &job;
    ftz.flags = c->flags;
    uint64_t t0 = profiling ? now_ns() : 0;
    if (c->flags & LAUNCH_FTZ)
        parallel(ftz, (int64_t)L.nblocks, chunk);
    else
        parallel(job, (int64_t)L.nblocks, chunk);
    if (profiling) {
        Prof& p = profile["kernel " + L.meta->name];
        p.ns += now_ns() - t0;
        p.calls++;
        p.threads += L.nblocks * L.nthreads;
    }
    _mm_setcsr(csr);
    set_activity("idle");
    if (L.failed) {
        code = L.code;
        err = L.err;
        return false;
    }
    std::string m2;
    if (!check_canaries(m2)) {
        code = 700;
        err = "kernel " + L.meta->name + ": " + m2;
        return false;
    }
    return true;
}

bool load_module(const CmdModule* c, int& code, std::string& err) {
    const uint8_t* p = (const uint8_t*)c->image;
    if (c->len < sizeof(ImageHeader)) {
        code = 200;
        err = "module image too short";
        return false;
    }
    ImageHeader h;
    memcpy(&h, p, sizeof h);
    if (memcmp(h.magic, IMAGE_MAGIC, 8) != 0 || h.version != IMAGE_VERSION || h.kernel_abi != CUDASIM_KERNEL_ABI ||
        sizeof h + h.meta_len + h.so_len > c->len) {
        code = 200;
        err = "module image from another version of the stand-in";
        return false;
    }
    auto m = std::make_unique<Module>();
    m->id = c->module;
    m->flags = (uint32_t)h.compile_flags;
    if (!parse_meta((const char*)p + sizeof h, h.meta_len, m->meta)) {
        code = 200;
        err = "module image with damaged metadata";
        return false;
    }
    const uint8_t* so = p + sizeof h + h.meta_len;
    m->inst.resize(all_workers.size());
    for (Instance& in : m->inst) {
        in.fd = memfd_create("cudasim-module", MFD_CLOEXEC);
        if (in.fd < 0 || write(in.fd, so, h.so_len) != (ssize_t)h.so_len) {
            code = 2;
            err = std::string("cannot stage a module: ") + strerror(errno);
            return false;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", in.fd);
        in.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!in.dl) {
            code = 200;
            err = std::string("cannot load the module: ") + dlerror();
            return false;
        }
        in.vars = (Vars*)dlsym(in.dl, "cudasim_vars");
        auto range = (void (*)(char**, char**))dlsym(in.dl, "cudasim_shared_range");
        if (!in.vars || !range) {
            code = 200;
            err = "module without the stand-in's runtime symbols";
            return false;
        }
        range(&in.shlo, &in.shhi);
        for (const KernelMeta& k : m->meta) {
            auto f = (void (*)(const char*))dlsym(in.dl, ("cudasim_entry_" + k.name).c_str());
            if (!f) {
                code = 200;
                err = "module lacks the entry of kernel " + k.name;
                return false;
            }
            in.entry.push_back(f);
        }
    }
    modules[c->module] = std::move(m);
    return true;
}

// ---- the worker pool ----

// A job is open while its tasks are being taken. Helpers join it by counting themselves in
// active; one that wakes after the job closed leaves without touching it, so the caller never
// waits for a helper the scheduler has not run yet (the machine is shared and small).
std::atomic<uint32_t> pool_gen{0};
std::atomic<uint32_t> pool_active{0};
std::atomic<bool> pool_open{false};
Job* pool_job;
int64_t pool_n, pool_chunk;
std::atomic<int64_t> pool_next;
std::atomic<bool> pool_stop;

void pool_work(int w) {
    for (;;) {
        if (pool_stop.load(std::memory_order_relaxed)) return;
        int64_t t = pool_next.fetch_add(pool_chunk, std::memory_order_relaxed);
        if (t >= pool_n) return;
        int64_t e = std::min(pool_n, t + pool_chunk);
        for (int64_t i = t; i < e; i++) {
            if (!pool_job->work(w, i)) {
                pool_stop.store(true);
                return;
            }
        }
    }
}

void setup_altstack() {
    stack_t ss;
    ss.ss_size = 256 << 10;
    ss.ss_sp = mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
}

Worker* new_worker(int id) {
    Worker* w = new Worker();
    w->id = id;
    size_t dyn = (MAX_DYN_SHARED + PAGE - 1) / PAGE * PAGE;
    char* p = (char*)mmap(nullptr, dyn + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot map shared memory");
    mprotect(p + dyn, PAGE, PROT_NONE);
    w->dyn_end = p + dyn;
    return w;
}

void* helper_main(void* arg) {
    Worker* w = (Worker*)arg;
    tls_worker = w;
    setup_altstack();
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        while ((g = pool_gen.load()) == seen) futex(&pool_gen, FUTEX_WAIT_PRIVATE, seen);
        seen = g;
        pool_active.fetch_add(1);
        if (pool_open.load()) pool_work(w->id);
        if (pool_active.fetch_sub(1) == 1) futex(&pool_active, FUTEX_WAKE_PRIVATE, 1);
    }
    return nullptr;
}

// ---- faults ----

void on_fault(int sig, siginfo_t* si, void* ucv) {
    static std::atomic<int> once{0};
    if (once.exchange(1)) {
        for (;;) pause();
    }
    Worker* w = tls_worker;
    uint64_t a = (uint64_t)si->si_addr;
    std::string where = "the device";
    if (w && w->in_block && w->L) {
        const Thread& t = w->order[thread_index(w)];
        char b[512];
        snprintf(b, sizeof b, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", w->L->meta->name.c_str(), w->block.x, w->block.y,
                 w->block.z, t.idx.x, t.idx.y, t.idx.z);
        where = b;
    } else if (w) {
        where = w->activity;
    }
    std::string what;
    int code = 700;
    if (sig == SIGSEGV || sig == SIGBUS) {
        bool write = false;
        if (ucv) write = (((ucontext_t*)ucv)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        const char* rw = write ? "invalid write" : "invalid read";
        bool done = false;
        for (Worker* x : all_workers) {
            for (auto& g : x->guards) {
                if (a >= (uint64_t)g.first && a < (uint64_t)g.second) {
                    char b[256];
                    snprintf(b, sizeof b, "stack overflow of a CUDA thread (its locals exceed %zu KiB; CUDASIM_STACK sets the size)",
                             stack_size >> 10);
                    what = b;
                    done = true;
                }
            }
            if (!done && a >= (uint64_t)x->dyn_end && a < (uint64_t)x->dyn_end + PAGE) {
                what = std::string(rw) + " past the end of the block's dynamic shared memory (sharedMemBytes of the launch)";
                done = true;
            }
        }
        if (!done) what = std::string(rw) + ": " + describe_address(a);
    } else if (sig == SIGFPE) {
        code = 719;
        what = "arithmetic exception (integer division by zero?)";
    } else {
        code = 715;
        what = "illegal instruction";
    }
    snprintf(ctl->detail, DETAIL_SIZE, "%s: %s", where.c_str(), what.c_str());
    ctl->status = code;
    ctl->fatal = 1;
    __atomic_store_n(&ctl->ack, batch_req, __ATOMIC_RELEASE);
    futex(&ctl->ack, FUTEX_WAKE, INT_MAX);
    _exit(70);
}

void* watch_parent(void* arg) {
    int fd = (int)(intptr_t)arg;
    char c;
    for (;;) {
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
    }
    print_profile();
    _exit(0);  // the user's process is gone
    return nullptr;
}

// ---- commands ----

void run_batch() {
    uint8_t* p = ctl->cmd;
    uint8_t* end = p + ctl->cmd_bytes;
    int code = 0;
    bool fatal = true;
    std::string err;
    bool maps_changed = false;
    while (p < end && code == 0) {
        CmdHeader* h = (CmdHeader*)p;
        if (h->size < sizeof(CmdHeader) || p + h->size > end) die("damaged command batch");
        uint64_t tc = profiling ? now_ns() : 0;
        switch (h->type) {
            case CMD_MAP: {
                CmdMap* c = (CmdMap*)h;
                if (mprotect((void*)c->addr, c->len, PROT_READ | PROT_WRITE) != 0) die("mprotect: %s", strerror(errno));
                if (c->kind == 1 && alias) mprotect((void*)(alias + (c->addr - devbase)), c->len, PROT_READ | PROT_WRITE);
                live[c->addr] = Region{c->addr, c->len, c->data, c->data_len, c->kind};
                maps_changed = true;
                break;
            }
            case CMD_UNMAP: {
                CmdMap* c = (CmdMap*)h;
                mprotect((void*)c->addr, c->len, PROT_NONE);
                if (c->kind == 1 && alias) mprotect((void*)(alias + (c->addr - devbase)), c->len, PROT_NONE);
                auto it = live.find(c->addr);
                if (it != live.end()) {
                    freed.push_back(it->second);
                    if (freed.size() > 4096) freed.pop_front();
                    live.erase(it);
                }
                maps_changed = true;
                break;
            }
            case CMD_LAUNCH: {
                if (maps_changed) rebuild_canaries(), maps_changed = false;
                if (!run_launch((CmdLaunch*)h, code, err)) break;
                break;
            }
            case CMD_COPY: {
                CmdCopy* c = (CmdCopy*)h;
                set_activity("a memory copy");
                uint64_t t0 = profiling ? now_ns() : 0;
                memmove((void*)c->dst, (const void*)c->src, c->len);
                if (profiling) {
                    Prof& p = profile["copies"];
                    p.ns += now_ns() - t0;
                    p.calls++;
                }
                set_activity("idle");
                break;
            }
            case CMD_MEMSET: {
                CmdMemset* c = (CmdMemset*)h;
                set_activity("a memset");
                if (c->elem == 1) {
                    memset((void*)c->dst, (int)(c->value & 0xff), c->count);
                } else if (c->elem == 2) {
                    uint16_t* d = (uint16_t*)c->dst;
                    for (uint64_t i = 0; i < c->count; i++) d[i] = (uint16_t)c->value;
                } else {
                    uint32_t* d = (uint32_t*)c->dst;
                    for (uint64_t i = 0; i < c->count; i++) d[i] = c->value;
                }
                set_activity("idle");
                break;
            }
            case CMD_EVENT: {
                CmdEvent* c = (CmdEvent*)h;
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                if (c->slot < MAX_EVENTS) ctl->event_ns[c->slot] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
                break;
            }
            case CMD_MODULE_LOAD: {
                if (!load_module((CmdModule*)h, code, err)) fatal = false;
                break;
            }
            case CMD_MODULE_UNLOAD: {
                modules.erase(((CmdModule*)h)->module);
                break;
            }
            case CMD_GEMM: {
                if (maps_changed) rebuild_canaries(), maps_changed = false;
                CmdGemm* g = (CmdGemm*)h;
                set_activity(g->what);
                uint64_t t0 = profiling ? now_ns() : 0;
                bool ok = run_gemm(*g, err);
                if (profiling) {
                    char key[160];
                    snprintf(key, sizeof key, "gemm %s%s %dx%dx%d batch %d types %d/%d", g->transa ? "T" : "N", g->transb ? "T" : "N", g->m,
                             g->n, g->k, g->batch, g->atype, g->ctype);
                    Prof& p = profile[key];
                    p.ns += now_ns() - t0;
                    p.calls++;
                }
                if (!ok) {
                    code = 1;
                    break;
                }
                set_activity("idle");
                std::string m2;
                if (!check_canaries(m2)) {
                    code = 700;
                    err = std::string(g->what) + ": " + m2;
                }
                break;
            }
            default:
                die("unknown command %u", h->type);
        }
        if (profiling && h->type != CMD_LAUNCH && h->type != CMD_GEMM && h->type != CMD_COPY) {
            static const char* names[] = {"", "map", "unmap", "", "", "memset", "event", "module load", "module unload", ""};
            Prof& pr = profile[std::string("command ") + (h->type < 10 ? names[h->type] : "?")];
            pr.ns += now_ns() - tc;
            pr.calls++;
        }
        p += h->size;
    }
    if (maps_changed) rebuild_canaries();
    fflush(stdout);
    fflush(stderr);
    ctl->status = code;
    ctl->fatal = code != 0 && fatal;
    if (code) snprintf(ctl->detail, DETAIL_SIZE, "%s", err.c_str());
}

}  // namespace

int workers() { return (int)all_workers.size(); }

void set_activity(const char* what) {
    if (tls_worker) tls_worker->activity = what;
}

void parallel(Job& job, int64_t n, int64_t chunk) {
    if (n <= 0) return;
    int nw = workers();
    if (nw == 1 || n <= chunk) {
        for (int64_t i = 0; i < n; i++)
            if (!job.work(0, i)) return;
        return;
    }
    pool_job = &job;
    pool_n = n;
    pool_chunk = chunk;
    pool_next.store(0);
    pool_stop.store(false);
    pool_open.store(true);
    pool_gen.fetch_add(1);
    futex(&pool_gen, FUTEX_WAKE_PRIVATE, INT_MAX);
    pool_work(0);
    pool_open.store(false);  // every task is taken; helpers that join now leave at once
    uint32_t b;
    while ((b = pool_active.load()) != 0) futex(&pool_active, FUTEX_WAIT_PRIVATE, b);
}

}  // namespace cudasim

using namespace cudasim;

// cudasim-device CONTROL_FD MEMORY_FD PIPE_FD DEVBASE
int main(int argc, char** argv) {
    if (argc != 6) die("started by hand? (it is run by the stand-in's libcuda.so.1)");
    int cfd = atoi(argv[1]), mfd = atoi(argv[2]), pfd = atoi(argv[3]);
    devbase = strtoull(argv[4], nullptr, 16);
    alias = strtoull(argv[5], nullptr, 16);
    for (int s : {SIGINT, SIGQUIT, SIGHUP, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) signal(s, SIG_IGN);
    ctl = (Control*)mmap(nullptr, control_size(), PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    if (ctl == MAP_FAILED || ctl->magic != PROTO_MAGIC || ctl->version != PROTO_VERSION) die("bad control block");
    void* dev = mmap((void*)devbase, DEV_SPACE, PROT_NONE, MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, mfd, 0);
    if (dev != (void*)devbase) die("cannot map device memory at %#llx: %s", (unsigned long long)devbase, strerror(errno));
    // Kernels reach pinned host memory at its host address (unified addressing); when that
    // range is taken here, they cannot, and such an access faults.
    if (mmap((void*)alias, DEV_SPACE, PROT_NONE, MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, mfd, 0) != (void*)alias) alias = 0;
    if (const char* s = getenv("CUDASIM_STACK")) {
        size_t kb = strtoull(s, nullptr, 10);
        if (kb >= 16 && kb <= 65536) stack_size = kb << 10;
    }
    if (const char* s = getenv("CUDASIM_PROFILE")) {
        profiling = *s && strcmp(s, "0") != 0;
        if (profiling && strcmp(s, "1") != 0) profile_path = s;
    }
    int nw = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (const char* s = getenv("CUDASIM_WORKERS")) nw = atoi(s);
    nw = std::max(1, std::min(nw, 64));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(s, &sa, nullptr);
    setup_altstack();
    for (int i = 0; i < nw; i++) all_workers.push_back(new_worker(i));
    tls_worker = all_workers[0];
    for (int i = 1; i < nw; i++) {
        pthread_t t;
        if (pthread_create(&t, nullptr, helper_main, all_workers[i]) != 0) die("pthread_create failed");
    }
    pthread_t watcher;
    pthread_create(&watcher, nullptr, watch_parent, (void*)(intptr_t)pfd);

    ctl->pid = getpid();
    ctl->workers = (uint32_t)nw;
    __atomic_store_n(&ctl->ready, 1, __ATOMIC_RELEASE);
    futex(&ctl->ready, FUTEX_WAKE, INT_MAX);
    uint32_t last = 0;
    for (;;) {
        uint32_t r;
        while ((r = __atomic_load_n(&ctl->req, __ATOMIC_ACQUIRE)) == last) futex(&ctl->req, FUTEX_WAIT, last);
        last = r;
        batch_req = r;
        uint64_t t0 = profiling ? now_ns() : 0;
        run_batch();
        if (profiling) batches++, batch_ns += now_ns() - t0;
        __atomic_store_n(&ctl->ack, r, __ATOMIC_RELEASE);
        futex(&ctl->ack, FUTEX_WAKE, INT_MAX);
    }
}
