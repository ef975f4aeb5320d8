// CPU kernels: plain functions over raw fp32 buffers, no model logic.
//
// Conventions (every kernel):
//  - activations are row-major; a "token row" index t runs over batch*seq;
//    per-head tensors are laid out [batch, seq, heads, head_dim];
//  - forward kernels OVERWRITE their outputs;
//  - backward kernels ACCUMULATE (+=) into every gradient they produce
//    (activation gradients and parameter gradients alike); the caller zeroes,
//    except for gradients it marks fresh (below);
//  - fresh gradients: a backward kernel with a `fresh` argument treats each
//    gradient whose bit is set (bit i: its i-th gradient argument, in
//    signature order) as holding no contribution yet and unspecified bytes
//    (NaN included). It writes the contribution as if added to +0 (0.0f + x,
//    a GEMM's fresh write (gemm_fp32.h), or a cache-hot row zeroed just
//    before the usual accumulating loop where that loop's products could
//    contract otherwise),
//    and zeros where it has no contribution: the exact bits accumulating into
//    a zeroed buffer gives, without the caller's memset pass;
//  - results are deterministic for a given thread count: every output element
//    is owned by one thread and reductions run in a fixed order;
//  - kernels allocate nothing large; scratch whose size grows with the
//    problem is passed in as `workspace` and sized by the *_workspace_floats
//    functions, so the engine can account for it.
#pragma once

#include <cstdint>
#include <functional>

namespace remat::cpu {

// Checks the variables that choose kernels: the ISA cap (isa_capped_at_avx2),
// REMAT_FP32_GEMM (gemm_fp32.h), REMAT_BF16_KERNEL (bf16.h) and
// REMAT_WORK_STEALING (internal.h), whether or not the run uses what they
// choose: InputError for a bad one.
void check_kernel_environment();
// Sets the thread count used by OpenMP kernels and OpenBLAS, after
// check_kernel_environment(), so a run starts with a bad variable refused.
void set_num_threads(int threads);
// Runs fn once on each thread of the kernels' OpenMP pool (num_threads of
// them, the calling thread among them), at the same time.
void run_on_every_thread(const std::function<void()>& fn);
int num_threads();
// Calls fn(i) once for each i in [0, n) on the kernels' threads, in no set
// order: for work whose result does not depend on which thread does what.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

// The ISA cap, to measure an AVX2-only machine on a newer one:
// REMAT_MAX_ISA=avx2 keeps every kernel to what such a CPU has (the bf16
// matmuls take their fallback, the bf16 peak reads 0; the other kernels are
// AVX2 + FMA already). OpenBLAS picks its kernels when it is loaded, from
// OPENBLAS_CORETYPE, so that must say Haswell (or older) as well. Throws
// InputError for a value other than avx2 or unset, or for OpenBLAS running
// AVX-512 kernels under the cap.
bool isa_capped_at_avx2();

// --- embedding: out[t, :] = table[tokens[t], :]
void embedding_forward(const int32_t* tokens, int64_t n_tokens, const float* table, int64_t dim,
                       float* out);
// dtable[tokens[t], :] += dout[t, :]. fresh: bit 0 dtable (rows no token
// reads end as +0.0f; such a row already all zero bits is read, not written).
void embedding_backward(const int32_t* tokens, int64_t n_tokens, const float* dout, int64_t dim,
                        int64_t vocab, float* dtable, uint32_t fresh = 0);

// --- RMSNorm over the last dim: out = x * rstd * w, rstd[r] = 1/sqrt(mean(x^2)+eps)
void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                     float* out, float* rstd);
// fresh: bit 0 dx, bit 1 dweight.
void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t rows, int64_t dim, float* dx, float* dweight, uint32_t fresh = 0);

// --- linear (no bias), PyTorch weight layout: y[m, n] = x[m, k] @ w[n, k]^T
void linear_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n, float* y);
// dx[m, k] += dy @ w ; dw[n, k] += dy^T @ x. fresh: bit 0 dx, bit 1 dw. A
// fresh dx may be x's own buffer: dw is made before dx overwrites x.
void linear_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                     int64_t n, float* dx, float* dw, uint32_t fresh = 0);

// --- linear with the weight stored (in, out): y[m, n] = x[m, k] @ w[k, n]
// (torchtitan's expert layout). dx += dy @ w^T ; dw += x^T @ dy (null: skipped).
// fresh: bit 0 dx, bit 1 dw. A fresh dx may be x's own buffer, as above.
void linear_in_out_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n,
                           float* y);
void linear_in_out_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                            int64_t n, float* dx, float* dw, uint32_t fresh = 0);

// --- mixture of experts (moe.cc). T tokens, E experts, top_k slots per
// token, D model dim. Expert ids, offsets and permutations are exact floats.
//
// Route: scores = softmax (or sigmoid) of logits[T, E] in fp32; each token
// picks the top_k experts by score + expert_bias (ties: the lower expert id),
// in descending order; out_scores[T, k] are the picked (unbiased) scores,
// out_indices[T, k] the expert ids. When counts is not null, counts[e] += the
// number of picks of expert e.
void moe_route_forward(const float* logits, const float* expert_bias, int64_t tokens,
                       int64_t experts, int64_t top_k, bool sigmoid, float* out_scores,
                       float* out_indices, float* counts);
// dlogits[T, E] += d(out_scores)/d(logits)^T dscores (scores recomputed from logits).
void moe_route_backward(const float* dscores, const float* logits, const float* indices,
                        int64_t tokens, int64_t experts, int64_t top_k, bool sigmoid,
                        float* dlogits, uint32_t fresh = 0);  // fresh: bit 0 dlogits
// Dispatch: rows[T*k, D] grouped by expert (stable: by expert, then token,
// then slot), row = x[t] * scores[t, slot]; offsets[E+1] the first row of
// each expert; perm[r] = t * k + slot of sorted row r.
void moe_dispatch_forward(const float* x, const float* scores, const float* indices, int64_t tokens,
                          int64_t dim, int64_t top_k, int64_t experts, float* rows, float* offsets,
                          float* perm);
void moe_dispatch_backward(const float* drows, const float* x, const float* scores,
                           const float* perm, int64_t tokens, int64_t dim, int64_t top_k, float* dx,
                           float* dscores, uint32_t fresh = 0);  // fresh: bit 0 dx, bit 1 dscores
// Grouped linear: for each expert e, out[seg e] = rows[seg e] @ w[e] with
// w[E, K, N] and seg e = [offsets[e], offsets[e+1]); one GEMM per segment.
void grouped_linear_forward(const float* rows, const float* offsets, const float* w,
                            int64_t experts, int64_t m, int64_t k, int64_t n, float* out);
void grouped_linear_backward(const float* dout, const float* rows, const float* offsets,
                             const float* w, int64_t experts, int64_t m, int64_t k, int64_t n,
                             float* drows, float* dw,
                             uint32_t fresh = 0);  // fresh: bit 0 drows, bit 1 dw (every expert's)
// A fresh drows may be rows' own buffer: every dw[e] is made before drows.
// Combine: y[t] = sum over slots (in slot order) of rows[r] with perm[r] = t*k+slot.
void moe_combine_forward(const float* rows, const float* perm, int64_t tokens, int64_t dim,
                         int64_t top_k, float* y);
void moe_combine_backward(const float* dy, const float* perm, int64_t tokens, int64_t dim,
                          int64_t top_k, float* drows, uint32_t fresh = 0);  // fresh: bit 0 drows
// Auxiliary-loss-free load balancing: delta = coeff * sign(mean(counts) -
// counts), centred to zero mean; expert_bias += delta; counts = 0.
void update_expert_bias(float* expert_bias, float* counts, int64_t experts, float coeff);

// --- RoPE, torchtitan's pair layout: for position p (= index within seq) and
// pair i of a head, (x[2i], x[2i+1]) is rotated by angle p * theta^(-2i/head_dim).
// Angles are computed in double precision, then cos/sin rounded to float.
void rope_forward(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  double theta, float* out);
// The same with row p of each sequence at position first_position + p: new
// tokens appended after first_position cached ones (decoding with a KV
// cache). rope_forward is first_position = 0.
void rope_forward_from(const float* x, int64_t batch, int64_t seq, int64_t first_position,
                       int64_t heads, int64_t head_dim, double theta, float* out);
// fresh: bit 0 dx.
void rope_backward(const float* dout, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                   double theta, float* dx, uint32_t fresh = 0);

// --- causal grouped-query attention, scaled by 1/sqrt(head_dim).
// q, out: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim];
// query head h uses kv head h / (heads / kv_heads).
// lse: [batch, heads, seq], natural-log log-sum-exp of each scaled score row.
// Never materialises a seq x seq matrix: tiles of queries x keys.
void attention_forward(const float* q, const float* k, const float* v, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t head_dim, float* out, float* lse);
// The same for `seq` new queries after `past` cached positions (decoding with
// a KV cache): q, out: [batch, seq, heads, head_dim] at positions past ..
// past + seq - 1; k, v: [batch, past + seq, kv_heads, head_dim], the cached
// keys and values followed by the new ones; lse: [batch, heads, seq]. Query
// row r sees keys 0 .. past + r. attention_forward is past = 0, and a query's
// result does not depend on how many queries share the call: one decoded
// position gives the bits the whole sequence at once gives for it.
void attention_forward_cached(const float* q, const float* k, const float* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, float* out, float* lse);
// The one place this size is written: the graph (graph/op.h) books it for
// the planner and the executor, so it is inline, needing no kernel code.
inline int64_t attention_backward_workspace_floats(int64_t batch, int64_t seq, int64_t heads) {
  return batch * heads * seq;  // rowsum(dO * O) per [batch, head, position]
}
void attention_backward(const float* dout, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, int64_t batch, int64_t seq,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq, float* dk,
                        float* dv, float* workspace, uint32_t fresh = 0);  // fresh: dq, dk, dv

// --- SwiGLU gate: out = silu(a) * b, elementwise over n. Backward: fresh
// da and db may be a's and b's own buffers (each element is read first).
void silu_mul_forward(const float* a, const float* b, int64_t n, float* out);
void silu_mul_backward(const float* dout, const float* a, const float* b, int64_t n, float* da,
                       float* db, uint32_t fresh = 0);  // fresh: bit 0 da, bit 1 db

// --- residual add: out = a + b; backward: da += dout, db += dout (a null
// da or db is skipped: the executor hands dout's buffer to that input)
void add_forward(const float* a, const float* b, int64_t n, float* out);
void add_backward(const float* dout, int64_t n, float* da, float* db,
                  uint32_t fresh = 0);  // fresh: bit 0 da, bit 1 db

// --- cross-entropy, mean over rows. logits: [rows, vocab]; lse: [rows].
// Returns the mean loss (summed in double, in row order).
double cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows,
                             int64_t vocab, float* lse);
// The same rows' lse, and their losses added to *loss_sum in row order:
// rows cut into consecutive calls sum to the bits of one call.
void cross_entropy_add_rows(const float* logits, const int32_t* targets, int64_t rows,
                            int64_t vocab, float* lse, double* loss_sum);
// Turns logits into their gradient IN PLACE: logits[r, :] <- (softmax - onehot)
// * scale (scale = dloss / rows). No second copy of the logits exists. This is
// the one backward that overwrites rather than accumulates.
void cross_entropy_backward_inplace(float* logits, const int32_t* targets, const float* lse,
                                    int64_t rows, int64_t vocab, float scale);

// --- the output projection and the cross-entropy fused, `chunk` rows of
// logits at a time: logits = x[rows, dim] @ w[vocab, dim]^T never exists
// whole. The projection of one chunk is the caller's (LossHeadProjection:
// fp32 here, bf16 operands in runtime/cpu_ops.cc); scratch holds
// min(chunk, rows) x vocab floats of logits. The forward returns the mean
// loss and writes lse[rows]. The backward rebuilds each chunk's logits, turns
// them into their gradient (scale 1 / rows) and hands it to the projection's
// backward, which adds the chunk's dx rows and its share of dw.
inline int64_t linear_cross_entropy_scratch_floats(int64_t rows, int64_t vocab, int64_t chunk) {
  return (rows < chunk ? rows : chunk) * vocab;
}
struct LossHeadProjection {
  // logits[m, vocab] = x[r0 .. r0 + m) @ w^T
  std::function<void(int64_t r0, int64_t m, float* logits)> forward;
  // dx[r0 .. r0 + m) (+)= dlogits @ w ; dw (+)= dlogits^T @ x[r0 ..]. fresh:
  // bit 0 dx, bit 1 dw (set for the first chunk only). dlogits may be reused.
  std::function<void(int64_t r0, int64_t m, float* dlogits, uint32_t fresh)> backward;
};
double linear_cross_entropy_forward(const LossHeadProjection& projection, const int32_t* targets,
                                    int64_t rows, int64_t vocab, int64_t chunk, float* scratch,
                                    float* lse);
void linear_cross_entropy_backward(const LossHeadProjection& projection, const int32_t* targets,
                                   const float* lse, int64_t rows, int64_t vocab, int64_t chunk,
                                   float* scratch, uint32_t fresh = 0);
// The fp32 projection (linear_forward / linear_backward on fp32 x and w).
LossHeadProjection fp32_loss_head(const float* x, const float* w, int64_t dim, int64_t vocab,
                                  float* dx = nullptr, float* dw = nullptr);

// --- optimizer helpers
// Sum of squares in double, deterministic (fixed chunking, fixed order).
double sum_squares(const float* x, int64_t n);
void scale_inplace(float* x, int64_t n, float factor);
// AdamW, decoupled weight decay, bias-corrected; step counts from 1. Reads
// each gradient as grad[i] * grad_scale (clipping's factor; 1 leaves it as is).
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  float grad_scale);

// --- machine peak: measured fp32 FMA throughput (FLOP/s) over `threads`
// threads: the faster of 8-wide AVX2 FMAs and, where the CPU has AVX-512F
// and REMAT_MAX_ISA allows it, 16-wide ones, each with enough independent
// chains to cover latency. Takes about `seconds` (or twice that) of wall time.
double measure_peak_flops(int threads, double seconds = 0.2);
// The best of `runs` measurements of `seconds` each: another process taking
// the cores during one run (which made a single measurement read half the
// true peak, and MFU 149%) does not lower the result. Runs are short: on a
// loaded host (load 8 on 2 cores) every 50 ms run shared its core and the
// best of 5 read a quarter of the peak (MFU 4x too high), while the best of
// 40 runs of 1 ms found the whole one, as it does on a quiet host.
double best_peak_flops(int threads, int runs = 40, double seconds = 0.001);

}  // namespace remat::cpu
