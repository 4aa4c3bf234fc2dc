// The device process: its worker pool and the pieces of it that gemm.cc uses.
#pragma once
#include <stdint.h>

#include <atomic>
#include <string>

#include "proto.h"

namespace cudasim {

// A job split into tasks that the workers take in turn. work returns false to stop early.
struct Job {
    virtual ~Job() = default;
    virtual bool work(int worker, int64_t task) = 0;
};

// Runs tasks 0..n-1 of job on every worker (the calling thread is worker 0); chunk tasks are
// taken at a time. Returns when all are done or one returned false.
void parallel(Job& job, int64_t n, int64_t chunk = 1);
int workers();

// What the device process is doing on this thread, for the fault handler's message.
void set_activity(const char* what);

// gemm.cc
bool run_gemm(const CmdGemm& g, std::string& err);

}  // namespace cudasim
