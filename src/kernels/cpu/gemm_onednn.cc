// gemm_onednn and gemm_onednn_f32 (gemm_onednn.h): cached oneDNN matmul
// primitives of a few block shapes, run on one thread each.
#include "kernels/cpu/gemm_onednn.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/internal.h"
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
  bool trans_a, trans_b;
  CWrite write;
  int64_t m, n, k, lda, ldb, ldc;
  auto tie() const { return std::tie(type, trans_a, trans_b, write, m, n, k, lda, ldb, ldc); }
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

// A dimension a primitive takes at run time (DNNL_RUNTIME_DIM_VAL): one
// primitive then runs every size of it (gemm_rows_at_run_time).
constexpr int64_t kRuntime = DNNL_RUNTIME_DIM_VAL;

dnnl::matmul::primitive_desc describe(const Shape& s) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  if (s.write == CWrite::kAccumulate) ops.append_sum(1.0f);  // C += the product, added in fp32
  // Fresh: the bits of accumulating into zeros, where a -0 product (a tiny
  // negative sum vdpbf16ps flushes, or an fp32 sum of products that cancel
  // to -0) becomes +0. 1 * x + 0 in the kernel's epilogue does exactly that
  // and leaves every other value as it is, instead of another pass over C.
  if (s.write == CWrite::kFresh) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1, 0);
  attr.set_post_ops(ops);
  const memory::desc a = matrix(s.m, s.k, s.trans_a, s.lda, s.type);
  const memory::desc b = matrix(s.k, s.n, s.trans_b, s.ldb, s.type);
  const memory::desc c = matrix(s.m, s.n, false, s.ldc, memory::data_type::f32);
  return {dnnl::matmul::desc(a, b, c), attr, cpu_engine()};
}

std::atomic<int64_t> created{0};
// How many DataDependentShapes scopes are open.
std::atomic<int> data_dependent{0};

// The primitive for `s`, created on first use (under the lock: creation
// JIT-compiles kernels) and kept. gemm_blocked asks for a few block shapes
// per layout, so the cache stays small; emptying it past kMaxPrimitives
// (oneDNN's own default cache capacity) only bounds its memory should
// callers bring many layouts, and callers still running an evicted
// primitive hold it by their reference.
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
    created.fetch_add(1, std::memory_order_relaxed);
    it = cache.emplace(s, std::move(made)).first;
  }
  return it->second;
}

// One primitive call of shape `s` on the calling thread, m x k by k x n as
// given (s.m or s.k may be left to run time, kRuntime); oneDNN reads A, B
// and C where they are.
void run(const Shape& s, int64_t m, int64_t k, const void* a, const void* b, float* c) {
  const std::shared_ptr<const Matmul> mm = matmul_for(s);
  thread_local std::vector<uint8_t> scratch;
  thread_local dnnl::stream stream(cpu_engine());
  const dnnl::engine& engine = cpu_engine();
  const bool fixed = s.m != kRuntime && s.k != kRuntime;
  const memory::desc a_desc = fixed ? mm->a : matrix(m, k, s.trans_a, s.lda, s.type);
  const memory::desc c_desc = fixed ? mm->c : matrix(m, s.n, false, s.ldc, memory::data_type::f32);
  const memory::desc b_desc = fixed ? mm->b : matrix(k, s.n, s.trans_b, s.ldb, s.type);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(a_desc, engine, const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, memory(b_desc, engine, const_cast<void*>(b))},
      {DNNL_ARG_DST, memory(c_desc, engine, c)}};
  if (mm->scratchpad.get_size() > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 memory(mm->scratchpad, engine,
                        detail::grown(scratch, static_cast<int64_t>(mm->scratchpad.get_size()))));
  }
  const OneOmpThread one;
  mm->primitive.execute(stream, args);
  stream.wait();
}

template <typename T>
memory::data_type type_of();
template <>
memory::data_type type_of<bf16>() {
  return memory::data_type::bf16;
}
template <>
memory::data_type type_of<float>() {
  return memory::data_type::f32;
}

// x[rows, cols] (row stride ld) into out[rows_out, cols_out], dense, the
// rest zero: products of padded k-values are 0 * 0, padded rows are dropped.
// Only the padding is zeroed, not the whole copy first.
template <typename T>
void copy_padded(const T* x, int64_t ld, int64_t rows, int64_t cols, int64_t rows_out,
                 int64_t cols_out, std::vector<T>& out) {
  T* dst = detail::grown(out, rows_out * cols_out);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = dst + r * cols_out;
    std::memcpy(row, x + r * ld, sizeof(T) * cols);
    std::fill(row + cols, row + cols_out, T{0});
  }
  std::fill(dst + rows * cols_out, dst + rows_out * cols_out, T{0});
}

// op(B)'s k-block as run: where it is, or a zero-padded copy of it.
template <typename T>
struct BlockB {
  const T* data;
  int64_t ld;
};

// Whether a block runs through a padded copy: where it is ragged.
bool copied(Block b) { return b.padded != b.size; }

template <typename T>
BlockB<T> block_b(bool trans_b, int64_t n, Block kb, const T* b, int64_t ldb) {
  if (!copied(kb)) return {b, ldb};
  thread_local std::vector<T> copy;
  if (trans_b) {  // stored [n, k]
    copy_padded(b, ldb, n, kb.size, n, kb.padded, copy);
    return {copy.data(), kb.padded};
  }
  copy_padded(b, ldb, kb.size, n, kb.padded, n, copy);
  return {copy.data(), n};
}

// C[mb, n] (+)= op(A)[mb, kb] @ B as one primitive call of the padded
// shape: A, and C where the rows are padded, go through zero-padded copies.
template <typename T>
void run_block(bool trans_a, bool trans_b, Block mb, int64_t n, Block kb, const T* a, int64_t lda,
               BlockB<T> b, CWrite write, float* c, int64_t ldc) {
  const memory::data_type type = type_of<T>();
  if (!copied(mb) && !copied(kb)) {
    run({type, trans_a, trans_b, write, mb.size, n, kb.size, lda, b.ld, ldc}, mb.size, kb.size, a,
        b.data, c);
    return;
  }
  thread_local std::vector<T> a_copy;
  thread_local std::vector<float> c_copy;
  if (trans_a) {  // stored [k, m]
    copy_padded(a, lda, kb.size, mb.size, kb.padded, mb.padded, a_copy);
  } else {
    copy_padded(a, lda, mb.size, kb.size, mb.padded, kb.padded, a_copy);
  }
  const int64_t a_ld = trans_a ? mb.padded : kb.padded;
  if (!copied(mb)) {
    run({type, trans_a, trans_b, write, mb.size, n, kb.padded, a_ld, b.ld, ldc}, mb.size, kb.padded,
        a_copy.data(), b.data, c);
    return;
  }
  detail::grown(c_copy, mb.padded * n);
  if (write == CWrite::kAccumulate) {
    for (int64_t r = 0; r < mb.size; ++r)
      std::memcpy(c_copy.data() + r * n, c + r * ldc, sizeof(float) * n);
  }
  run({type, trans_a, trans_b, write, mb.padded, n, kb.padded, a_ld, b.ld, n}, mb.padded, kb.padded,
      a_copy.data(), b.data, c_copy.data());
  for (int64_t r = 0; r < mb.size; ++r)
    std::memcpy(c + r * ldc, c_copy.data() + r * n, sizeof(float) * n);
}

// The primitive's shape for a call of shape `s` under DataDependentShapes:
// the dimension over an expert's rows left to run time.
Shape rows_at_run_time(Shape s) {
  (s.trans_a ? s.k : s.m) = kRuntime;
  return s;
}

// C (+)= op(A) @ op(B) cut into blocks of next_block's sizes: K blocks in
// order, each added onto what the ones before it wrote; M blocks within
// each.
template <typename T>
void gemm_cut(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
              const T* b, int64_t ldb, CWrite write, float* c, int64_t ldc) {
  Block (*next_k)(int64_t) = trans_a ? next_block : next_depth_block;
  for (int64_t p0 = 0; p0 < k;) {
    const Block kb = next_k(k - p0);
    const BlockB<T> b_block = block_b(trans_b, n, kb, trans_b ? b + p0 : b + p0 * ldb, ldb);
    const CWrite block_write = p0 == 0 ? write : CWrite::kAccumulate;
    for (int64_t i0 = 0; i0 < m;) {
      const Block mb = next_block(m - i0);
      const T* a_block = trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0;
      run_block(trans_a, trans_b, mb, n, kb, a_block, lda, b_block, block_write, c + i0 * ldc, ldc);
      i0 += mb.size;
    }
    p0 += kb.size;
  }
}

// A call under DataDependentShapes. The dimension over an expert's rows (M
// where A is those rows: the forward product and drows; K where A is read
// transposed: dw = rows^T @ dout) is left to run time, so no rows are
// padded or copied: oneDNN 2.6 runs such a primitive on gemm:jit, fp32 and
// bf16 alike. Against the fixed-shape brgemm primitives (Zen 4, one
// thread), gemm:jit is as fast or faster on every layout (100-106 GFLOP/s
// fp32 and 180-220 bf16 at K = 256 or 512 by N = 512 or 256, from 24 rows
// up), but one: B read transposed (drows = dout @ w^T), where it packs B
// on every call and ran 96 against 109 GFLOP/s at 128 rows by K = 512. So
// there, whole 128-row blocks stay on the fixed-shape primitive, and only
// the ragged tail runs at run time. (The 128-row blocks and padded tails
// of 32-row steps this replaced computed 5-8% more rows than the experts
// held, and copied every tail.) The other dimensions are model dimensions,
// fixed, so a layout takes one primitive per way of writing C whatever the
// rows, and one more where whole blocks are cut.
template <typename T>
void gemm_rows_at_run_time(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                           int64_t lda, const T* b, int64_t ldb, CWrite write, float* c,
                           int64_t ldc) {
  constexpr int64_t kWholeRows = 128;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: C is the sum of none, or left as it is
    if (write != CWrite::kAccumulate) {
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
    }
    return;
  }
  if (trans_b && !trans_a) {
    for (; m >= kWholeRows; m -= kWholeRows, a += kWholeRows * lda, c += kWholeRows * ldc)
      gemm_cut(trans_a, trans_b, kWholeRows, n, k, a, lda, b, ldb, write, c, ldc);
    if (m == 0) return;
  }
  run(rows_at_run_time({type_of<T>(), trans_a, trans_b, write, m, n, k, lda, ldb, ldc}), m, k, a, b,
      c);
}

template <typename T>
void gemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                  int64_t lda, const T* b, int64_t ldb, CWrite write, float* c, int64_t ldc) {
  if (data_dependent_shapes()) {
    gemm_rows_at_run_time(trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
  } else {
    gemm_cut(trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
  }
}

// Whether oneDNN's matmul for a small problem of `type` is more than its
// reference implementation.
bool has_fast_matmul(memory::data_type type) {
  try {
    const OneOmpThread one;
    const std::string impl =
        describe({type, false, false, CWrite::kOverwrite, 32, 32, 32, 32, 32, 32}).impl_info_str();
    return impl.rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

Block next_block(int64_t rest) {
  // Whole blocks of 128 rows or more are never padded: 64-row steps up to
  // 512 (the dense linears' row chunks and weight-gradient rows are such
  // sizes, so their calls stay one block), then powers of two. Only a last
  // block under 128 is rounded up, by at most 15 rows of padding.
  constexpr int64_t kGrain = 16, kWhole = 128, kStep = 64, kLarge = 512;
  if (rest >= kLarge) {
    int64_t size = kLarge;
    while (size <= rest / 2) size *= 2;
    return {size, size};
  }
  if (rest >= kWhole) {
    const int64_t size = rest / kStep * kStep;
    return {size, size};
  }
  return {rest, (rest + kGrain - 1) / kGrain * kGrain};
}

Block next_depth_block(int64_t rest) {
  constexpr int64_t kDeepest = 512;
  const Block block = next_block(rest);
  return block.size > kDeepest ? Block{kDeepest, kDeepest} : block;
}

bool data_dependent_shapes() { return data_dependent.load(std::memory_order_relaxed) > 0; }

DataDependentShapes::DataDependentShapes() { data_dependent.fetch_add(1); }
DataDependentShapes::~DataDependentShapes() { data_dependent.fetch_sub(1); }

int64_t onednn_primitives_created() { return created.load(std::memory_order_relaxed); }

bool onednn_bf16_available() {
  static const bool available = cpu_has_avx512_bf16() && has_fast_matmul(memory::data_type::bf16);
  return available;
}

bool onednn_f32_available() {
  static const bool available = has_fast_matmul(memory::data_type::f32);
  return available;
}

void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
                 int64_t lda, const bf16* b, int64_t ldb, CWrite write, float* c, int64_t ldc) {
  gemm_blocked(trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
}

void gemm_onednn_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, CWrite write, float* c,
                     int64_t ldc) {
  gemm_blocked(trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
}

std::string onednn_f32_implementation(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      int64_t lda, int64_t ldb, CWrite write, int64_t ldc) {
  const OneOmpThread one;
  const Shape s{memory::data_type::f32, trans_a, trans_b, write, m, n, k, lda, ldb, ldc};
  return describe(data_dependent_shapes() ? rows_at_run_time(s) : s).impl_info_str();
}

bool onednn_f32_is_brgemm() {
  const OneOmpThread one;
  const Shape s{
      memory::data_type::f32, false, false, CWrite::kOverwrite, 256, 256, 256, 256, 256, 256};
  return std::string(describe(s).impl_info_str()).rfind("brg", 0) == 0;
}

}  // namespace remat::cpu::detail
