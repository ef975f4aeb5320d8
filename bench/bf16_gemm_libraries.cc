// remat's bf16 GEMM against the libraries Debian ships with one: oneDNN's
// bf16 matmul (libdnnl-dev, which the engine links) and libxsmm's OpenMP
// bf16 GEMM (libxsmm-dev, built in where CMake finds it). The evidence for
// issue 11's "native bf16 dot products: oneDNN, libxsmm or your own kernels,
// chosen by measurement"; REMAT_BF16_KERNEL=native or onednn picks remat's
// side (the engine's default is onednn).
//
// Shapes: the wide model (dim 1024, FFN hidden 2816 from llama3's formula,
// rows = batch 2 x seq 1024 = 2048), in the three layouts a linear layer
// runs: y = x @ W^T (forward), dx += dy @ W and dW += dy^T @ x (backward).
// bf16 operands, fp32 outputs; the backward ones accumulate (beta 1, oneDNN's
// sum post-op), as the engine's do. remat's side is the engine's own call
// (linear_bf16_forward / linear_bf16_backward: B prepared per call, fixed row
// chunks over the threads); the libraries' set-up (oneDNN's primitive) is
// made once, outside the timing, as a cache in the engine would. oneDNN runs
// twice: one matmul on its own threads, and in the engine's fixed row chunks
// (one matmul per chunk on one thread, what bits independent of the thread
// count would need).
//
// Interleaved rounds (one call of each implementation per round, in turn),
// so a neighbour's load hits all of them alike; GFLOP/s median and upper
// decile (the host's other tenants only ever slow a call down) and the share
// of the measured vdpbf16ps peak.
//
//   ninja -C build bf16_gemm_libraries && build/bf16_gemm_libraries [threads] [rounds]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#ifdef REMAT_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

using remat::cpu::bf16;

struct Layout {
  const char* pass;
  bool trans_a, trans_b;  // row-major C[m, n] (+)= op(A)[m, k] @ op(B)[k, n]
  float beta;
};

struct Problem {
  std::string name;
  int64_t m, n, k;  // of the GEMM as run (C is m x n)
  Layout layout;
};

struct Operands {
  std::vector<bf16> a, b;
  std::vector<float> c;
};

std::vector<bf16> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<bf16> v(static_cast<size_t>(n));
  for (bf16& x : v) x = remat::cpu::to_bf16(dist(gen));
  return v;
}

// A linear layer x[rows, in] -> y[rows, out] with W stored [out, in] (PyTorch).
std::vector<Problem> problems_of(const char* name, int64_t rows, int64_t in, int64_t out) {
  return {{name, rows, out, in, {"y", false, true, 0.0f}},
          {name, rows, in, out, {"dx", false, false, 1.0f}},
          {name, out, in, rows, {"dw", true, false, 1.0f}}};
}

// remat: the engine's linear-layer entry points, which run each layout.
std::function<void()> remat_call(const Problem& p, Operands& o) {
  const Layout& l = p.layout;
  if (std::string(l.pass) == "y") {  // a = x[m, k], b = W[n, k]
    return [&o, p] {
      remat::cpu::linear_bf16_forward(o.a.data(), o.b.data(), false, p.m, p.k, p.n, o.c.data(),
                                      false);
    };
  }
  if (std::string(l.pass) == "dx") {  // a = dy[m, k=out], b = W[out, n=in]
    return [&o, p] {
      remat::cpu::linear_bf16_backward(o.a.data(), nullptr, o.b.data(), false, p.m, p.n, p.k,
                                       o.c.data(), nullptr);
    };
  }
  // dw[out, in] += dy^T @ x: a = dy[rows=k, out=m], b = x[rows, in=n].
  return [&o, p] {
    remat::cpu::linear_bf16_backward(o.a.data(), o.b.data(), nullptr, false, p.k, p.n, p.m, nullptr,
                                     o.c.data());
  };
}

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// One matmul on rows [r0, r1) of C: its primitive and memory objects.
struct DnnlChunk {
  std::shared_ptr<dnnl::matmul> prim;
  std::shared_ptr<dnnl::memory> a, b, c;
  std::shared_ptr<dnnl::stream> stream;
};

DnnlChunk dnnl_chunk(Dnnl& d, const Problem& p, Operands& o, int64_t r0, int64_t r1,
                     std::string& impl) {
  using dnnl::memory;
  const Layout& l = p.layout;
  const int64_t rows = r1 - r0;
  // Row-major op(A): stored [m, k], or [k, m] and read transposed (strides).
  const memory::dims a_strides = l.trans_a ? memory::dims{1, p.m} : memory::dims{p.k, 1};
  const memory::dims b_strides = l.trans_b ? memory::dims{1, p.k} : memory::dims{p.n, 1};
  const memory::desc a_md({rows, p.k}, memory::data_type::bf16, a_strides);
  const memory::desc b_md({p.k, p.n}, memory::data_type::bf16, b_strides);
  const memory::desc c_md({rows, p.n}, memory::data_type::f32, memory::dims{p.n, 1});
  dnnl::primitive_attr attr;
  if (l.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, d.engine);
  impl = pd.impl_info_str();
  bf16* a = o.a.data() + (l.trans_a ? r0 : r0 * p.k);
  return {std::make_shared<dnnl::matmul>(pd), std::make_shared<memory>(a_md, d.engine, a),
          std::make_shared<memory>(b_md, d.engine, o.b.data()),
          std::make_shared<memory>(c_md, d.engine, o.c.data() + r0 * p.n),
          std::make_shared<dnnl::stream>(d.engine)};
}

void execute(const DnnlChunk& c) {
  c.prim->execute(*c.stream,
                  {{DNNL_ARG_SRC, *c.a}, {DNNL_ARG_WEIGHTS, *c.b}, {DNNL_ARG_DST, *c.c}});
  c.stream->wait();
}

// The whole product as one matmul on oneDNN's own threads.
std::function<void()> dnnl_call(Dnnl& d, const Problem& p, Operands& o, std::string& impl) {
  return [c = dnnl_chunk(d, p, o, 0, p.m, impl)] { execute(c); };
}

// As the engine runs its GEMMs for bits that never depend on the thread
// count: C's rows in the fixed chunks of detail::split_rows, each chunk one
// matmul on one thread (oneDNN runs sequentially inside an OpenMP team).
std::function<void()> dnnl_chunked_call(Dnnl& d, const Problem& p, Operands& o) {
  std::vector<DnnlChunk> chunks;
  const int64_t rows = remat::cpu::detail::chunk_rows(p.m);
  std::string impl;
  for (int64_t r0 = 0; r0 < p.m; r0 += rows) {
    chunks.push_back(dnnl_chunk(d, p, o, r0, std::min(p.m, r0 + rows), impl));
  }
  return [chunks] {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < chunks.size(); ++i) execute(chunks[i]);
  };
}

#ifdef REMAT_HAVE_LIBXSMM
// libxsmm is column-major: row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T, i.e. the same buffers with A and B swapped.
std::function<void()> libxsmm_call(const Problem& p, Operands& o) {
  return [&o, p] {
    const char ta = p.layout.trans_b ? 'T' : 'N', tb = p.layout.trans_a ? 'T' : 'N';
    const libxsmm_blasint m = p.n, n = p.m, k = p.k;
    const libxsmm_blasint lda = p.layout.trans_b ? p.k : p.n;
    const libxsmm_blasint ldb = p.layout.trans_a ? p.m : p.k, ldc = p.n;
    const float alpha = 1.0f, beta = p.layout.beta;
    libxsmm_xgemm_omp(LIBXSMM_GEMM_PRECISION_BF16, LIBXSMM_GEMM_PRECISION_F32, &ta, &tb, &m, &n, &k,
                      &alpha, o.b.data(), &lda, o.a.data(), &ldb, &beta, o.c.data(), &ldc);
  };
}
#endif

struct Contender {
  std::string name;
  std::function<void()> call;
  std::vector<double> seconds;
  bool wrong = false;  // its C differs from remat's: not timed
};

double quantile(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (pos - static_cast<double>(lo)) * (x[hi] - x[lo]);
}

// Whether each contender computes the product: C from zeros, against the
// first contender's (remat's) C. bf16 products are exact in fp32, so only
// the summation order differs: a relative error of 1e-3 of the largest
// element is far above that and far below a wrong or skipped product.
void check_results(std::vector<Contender>& contenders, Operands& o) {
  std::vector<float> first;
  for (Contender& c : contenders) {
    std::fill(o.c.begin(), o.c.end(), 0.0f);
    c.call();
    if (first.empty()) {
      first = o.c;
      continue;
    }
    float scale = 0, error = 0;
    for (size_t i = 0; i < first.size(); ++i) {
      scale = std::max(scale, std::abs(first[i]));
      error = std::max(error, std::abs(first[i] - o.c[i]));
    }
    c.wrong = !(error <= 1e-3f * scale);
  }
}

void run_problem(const Problem& p, std::vector<Contender>& contenders, Operands& o, int rounds,
                 double peak) {
  using Clock = std::chrono::steady_clock;
  check_results(contenders, o);  // also the warm-up: page faults, JIT, thread team
  for (int r = 0; r < rounds; ++r) {
    for (Contender& c : contenders) {
      if (c.wrong) continue;
      const auto start = Clock::now();
      c.call();
      c.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  const double flops = 2.0 * static_cast<double>(p.m * p.n * p.k);
  for (const Contender& c : contenders) {
    if (c.wrong) {
      std::printf("| %s | %s | | %s | wrong result | | |\n", p.name.c_str(), p.layout.pass,
                  c.name.c_str());
      continue;
    }
    // Rates: the median call, and the upper decile of rates = the lower
    // decile of times.
    const double med = flops / quantile(c.seconds, 0.5) / 1e9;
    const double top = flops / quantile(c.seconds, 0.1) / 1e9;
    std::printf("| %s | %s | %lldx%lldx%lld | %s | %.1f | %.1f | %.0f%% |\n", p.name.c_str(),
                p.layout.pass, static_cast<long long>(p.m), static_cast<long long>(p.n),
                static_cast<long long>(p.k), c.name.c_str(), med, top,
                peak > 0 ? 100.0 * med * 1e9 / peak : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  remat::cpu::set_num_threads(threads);
  omp_set_num_threads(threads);
  const double peak = remat::cpu::best_peak_flops_bf16(threads);
  std::printf("%d threads, %d interleaved rounds; measured vdpbf16ps peak %.1f GFLOP/s\n\n",
              threads, rounds, peak / 1e9);
  Dnnl dnnl;
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d\n", v->major, v->minor, v->patch);
#ifdef REMAT_HAVE_LIBXSMM
  libxsmm_init();
  std::printf("libxsmm %s, target %s\n", LIBXSMM_VERSION, libxsmm_get_target_arch());
#endif
  const int64_t rows = 2048, dim = 1024, hidden = 2816;
  std::vector<Problem> problems;
  for (const auto& group :
       {problems_of("wq/wk/wv/wo", rows, dim, dim), problems_of("w1/w3", rows, dim, hidden),
        problems_of("w2", rows, hidden, dim)}) {
    problems.insert(problems.end(), group.begin(), group.end());
  }
  std::printf(
      "\n| matmul | pass | m x n x k | implementation | median GFLOP/s | upper decile | "
      "median / bf16 peak |\n|---|---|---|---|---:|---:|---:|\n");
  for (const Problem& p : problems) {
    Operands o;
    o.a = random_bf16(p.m * p.k, 1);
    o.b = random_bf16(p.k * p.n, 2);
    o.c.assign(static_cast<size_t>(p.m * p.n), 0.0f);
    std::vector<Contender> contenders;
    contenders.push_back({std::string("remat ") + remat::cpu::to_string(remat::cpu::bf16_gemm()),
                          remat_call(p, o),
                          {}});
    std::string impl;
    auto call = dnnl_call(dnnl, p, o, impl);
    contenders.push_back({"oneDNN (" + impl + ")", call, {}});
    contenders.push_back({"oneDNN, remat's row chunks", dnnl_chunked_call(dnnl, p, o), {}});
#ifdef REMAT_HAVE_LIBXSMM
    contenders.push_back({"libxsmm xgemm_omp", libxsmm_call(p, o), {}});
#endif
    run_problem(p, contenders, o, rounds, peak);
  }
  return 0;
}
