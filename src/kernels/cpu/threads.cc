// Thread count shared by the OpenMP kernels and OpenBLAS, and the per-thread
// tile scratch.
#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {
std::atomic<int> g_threads{0};  // 0: not set yet, use the OpenMP default
}

void check_kernel_environment() {
  isa_capped_at_avx2();
  fp32_gemm();
  forced_bf16_gemm();  // bf16_gemm() itself would time the CPU in fp32 runs too
  detail::work_stealing();
}

void set_num_threads(int threads) {
  check_kernel_environment();  // a bad variable stops the run here, before any kernel
  if (threads < 1) threads = 1;
  g_threads.store(threads);
  omp_set_num_threads(threads);
  // OpenBLAS stays single-threaded: linear.cc splits GEMMs over this pool.
  openblas_set_num_threads(1);
}

int num_threads() {
  int t = g_threads.load();
  return t > 0 ? t : omp_get_max_threads();
}

void run_on_every_thread(const std::function<void()>& fn) {
#pragma omp parallel num_threads(num_threads())
  fn();
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
#pragma omp parallel for schedule(dynamic) num_threads(num_threads()) if (n > 1)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

namespace detail {

bool work_stealing() {
  static const bool on = [] {
    const char* value = std::getenv("REMAT_WORK_STEALING");
    const std::string choice = value == nullptr ? "" : value;
    if (choice.empty() || choice == "1") return true;
    if (choice == "0") return false;
    throw InputError("REMAT_WORK_STEALING=\"" + choice + "\": expected 0, 1 or unset");
  }();
  return on;
}

namespace {
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
struct Scratch {
  std::unique_ptr<float, FreeDeleter> data;
  size_t capacity = 0;
};
thread_local Scratch t_scratch;
}  // namespace

float* thread_scratch(size_t floats) {
  Scratch& s = t_scratch;
  if (floats > s.capacity) {
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    s.data.reset(static_cast<float*>(p));
    s.capacity = floats;
  }
  return s.data.get();
}

}  // namespace detail
}  // namespace remat::cpu
