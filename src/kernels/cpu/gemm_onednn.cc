// gemm_onednn (gemm_onednn.h): cached oneDNN matmul primitives run on one
// thread each.
#include "kernels/cpu/gemm_onednn.h"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace remat::cpu::detail {

namespace {

using dnnl::memory;

// The calling thread's OpenMP thread count set to 1 while in scope: oneDNN
// reads it when it creates a primitive (its work split) and when it runs one
// outside a team (how many threads to fork).
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(saved_); }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine = [] {
    // oneDNN takes its ISA cap only before it first looks at the CPU.
    if (isa_capped_at_avx2()) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

struct Shape {
  memory::data_type type;  // of A and B; C is f32
  CWrite write;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  auto tie() const { return std::tie(type, write, trans_a, trans_b, m, n, k, lda, ldb, ldc); }
  bool operator<(const Shape& o) const { return tie() < o.tie(); }
};

struct Matmul {
  memory::desc a, b, c, scratchpad;
  dnnl::matmul primitive;
};

// Row-major op(A)[m, k] stored [m, k] or, transposed, [k, m]: a view by strides.
memory::desc matrix(int64_t rows, int64_t cols, bool trans, int64_t ld, memory::data_type type) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

dnnl::post_ops post_ops_for(CWrite write) {
  dnnl::post_ops ops;
  if (write == CWrite::kAccumulate) ops.append_sum(1.0f);  // C += the product, added in fp32
  // 1 * x + 0 in the kernel's registers: -0 becomes +0, as 0 + x would.
  if (write == CWrite::kFresh)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, 0.0f);
  return ops;
}

dnnl::matmul::primitive_desc describe(const Shape& s) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.write != CWrite::kOverwrite) attr.set_post_ops(post_ops_for(s.write));
  const memory::desc a = matrix(s.m, s.k, s.trans_a, s.lda, s.type);
  const memory::desc b = matrix(s.k, s.n, s.trans_b, s.ldb, s.type);
  const memory::desc c = matrix(s.m, s.n, false, s.ldc, memory::data_type::f32);
  return {dnnl::matmul::desc(a, b, c), attr, cpu_engine()};
}

// The primitive for `s`, created on first use (under the lock: creation
// JIT-compiles kernels) and kept. The dense linears' shapes are a handful
// per model; an MoE's expert token counts change every step and bring new
// ones, so the cache is emptied when it passes kMaxPrimitives (oneDNN's own
// default cache capacity): a bound on its memory, where callers still
// running an evicted primitive hold it by their reference.
std::shared_ptr<const Matmul> matmul_for(const Shape& s) {
  constexpr size_t kMaxPrimitives = 1024;
  static std::mutex mutex;
  static std::map<Shape, std::shared_ptr<const Matmul>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(s);
  if (it == cache.end()) {
    if (cache.size() >= kMaxPrimitives) cache.clear();
    const OneOmpThread one;
    const dnnl::matmul::primitive_desc pd = describe(s);
    auto made = std::make_shared<const Matmul>(Matmul{
        pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc(), dnnl::matmul(pd)});
    it = cache.emplace(s, std::move(made)).first;
  }
  return it->second;
}

// Whether oneDNN's matmul for a small problem of `type` is more than its
// reference implementation.
bool has_fast_matmul(memory::data_type type) {
  try {
    const OneOmpThread one;
    const std::string impl =
        describe({type, CWrite::kOverwrite, false, false, 32, 32, 32, 32, 32, 32}).impl_info_str();
    return impl.rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Runs `s` on A, B and C where they are (oneDNN reads them by pointer).
void run(const Shape& s, const void* a, const void* b, float* c) {
  const std::shared_ptr<const Matmul> mm = matmul_for(s);
  thread_local std::vector<uint8_t> scratch;
  thread_local dnnl::stream stream(cpu_engine());
  const dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(mm->a, engine, const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, memory(mm->b, engine, const_cast<void*>(b))},
      {DNNL_ARG_DST, memory(mm->c, engine, c)}};
  if (mm->scratchpad.get_size() > 0) {
    scratch.resize(mm->scratchpad.get_size());
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(mm->scratchpad, engine, scratch.data()));
  }
  const OneOmpThread one;
  mm->primitive.execute(stream, args);
  stream.wait();
}

}  // namespace

bool onednn_bf16_available() {
  static const bool available = cpu_has_avx512_bf16() && has_fast_matmul(memory::data_type::bf16);
  return available;
}

bool onednn_f32_available() {
  static const bool available = has_fast_matmul(memory::data_type::f32);
  return available;
}

void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
                 int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const CWrite write = beta != 0.0f ? CWrite::kAccumulate : CWrite::kOverwrite;
  run({memory::data_type::bf16, write, trans_a, trans_b, m, n, k, lda, ldb, ldc}, a, b, c);
}

void gemm_onednn_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, CWrite write, float* c,
                     int64_t ldc) {
  run({memory::data_type::f32, write, trans_a, trans_b, m, n, k, lda, ldb, ldc}, a, b, c);
}

std::string onednn_f32_implementation(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      int64_t lda, int64_t ldb, CWrite write, int64_t ldc) {
  const OneOmpThread one;
  return describe({memory::data_type::f32, write, trans_a, trans_b, m, n, k, lda, ldb, ldc})
      .impl_info_str();
}

}  // namespace remat::cpu::detail
