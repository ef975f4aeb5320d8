// The executor: runs a schedule (ac/schedule.h) step by step: forward
// kernels, recomputation, backward kernels, each through the model state's
// backend; allocating each value when it is produced and releasing it right
// after the step the schedule names.
//
// In dry-run mode (a counting-only allocator) no kernel runs and no memory is
// touched: the same allocation requests are made in the same order, so the
// allocator's books are exactly those of a real run. The planner uses that.
//
// bf16 compute (Program::compute_dtype, torchtitan's mixed precision): the
// master weights, their gradients and the optimizer state stay fp32; values
// are stored in the dtypes the program gives them (activations, kept ones
// included, in bf16: half the bytes). Everything the executor adds for it
// is allocated here, so the planner's replay books it too:
//  - the bf16 copy of a weight that an op whose kernels take bf16 weights
//    reads (Backend::bf16_use kAll: the matmuls on a bf16 GEMM, onednn or
//    native; a fallback that computes in fp32 reads the masters). The copies
//    of a run of consecutive steps in one gather unit (gather_unit: a block's
//    forward, or its recompute and backward) are all cast at the run's first
//    step and released after its last: the same bytes at the same moments
//    whatever the plan re-runs, which the budget solver's block model relies
//    on (step_bookings below);
//  - for an op whose kernels take only fp32 (Bf16Use::kNone: softmax, loss,
//    MoE routing), fp32 copies of its bf16 inputs and outputs, live for that
//    one step: it computes in fp32 and its outputs are rounded to bf16 once,
//    as a kernel that widens on load and rounds on store would
//    (kActivations ops, the norms, RoPE, SwiGLU, the add and attention, do
//    just that on the values themselves);
//  - for a bf16 matmul's backward, a bf16 copy of the gradient of its output.
// Gradients of activations are fp32 and accumulate in fp32.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ac/block_memory.h"
#include "ac/schedule.h"
#include "runtime/model_state.h"

namespace remat {

struct Batch {
  const int32_t* inputs = nullptr;   // [batch * seq] token ids
  const int32_t* targets = nullptr;  // [batch * seq] next-token ids
};

// What one run executed, counted as it ran (not derived from the plan), so a
// test can hold the plan to what really happened.
struct ExecutionCounts {
  int64_t forward_ops = 0, recompute_ops = 0, backward_ops = 0;
  int64_t forward_matmuls = 0, recompute_matmuls = 0, backward_matmuls = 0;
  int64_t forward_flops = 0, recompute_flops = 0, backward_flops = 0;
  std::vector<int32_t> recomputed_nodes;  // in execution order
  // Wall time per (phase, op kind name), filled when profiling is on.
  std::map<std::string, double> seconds_by_op;
  // Wall time of each node's forward step, filled when profiling is on (the
  // measured cost model times ops with it).
  std::vector<double> forward_seconds_by_node;
  std::vector<double> backward_seconds_by_node;
  // Every step's start (seconds from the start of run()) and duration, in
  // schedule order, filled when profiling is on: the profile trace's events.
  struct StepTime {
    double start = 0, seconds = 0;
  };
  std::vector<StepTime> step_times;
  int64_t executed_flops() const { return forward_flops + recompute_flops + backward_flops; }
};

// The unit whose weights a step reads, as FSDP gathers them: each block, in
// the forward and (with its recompute) in the backward under distinct keys;
// outside the blocks one key both ways (the output's weights stay from the
// end of the forward into the start of the backward).
int32_t gather_unit(const Program& program, const Step& step);

// What the executor books for each node's steps beyond its values and
// gradients (ac/block_memory.h), as Executor's forward and backward book it
// on `backend`: the budget solver's block model reads it.
StepBookings step_bookings(const Program& program, Backend& backend);

// Where the kernels find the parameters and their gradients when they are
// not the model state's own tensors: a sharded run gathers each unit into a
// buffer of its own (runtime/sharded_state.h). The executor calls
// before_step(i) ahead of schedule step i (before the step observer) and
// after_run() once the last step has run; params[p] and grads[p] must point
// at parameter p's fp32 buffers during every step that reads them. A
// gradient buffer belongs to one run: the schedule's first writer of p
// (Step::fresh_grad_params) overwrites it, whatever bytes it starts with.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void before_step(size_t index) = 0;
  virtual void after_run() = 0;

  std::vector<float*> params, grads;  // per ParamId
};

// What a run does with the parameter gradients it computes.
enum class ParamGradients {
  // They replace what the gradient buffers held: the schedule's first writer
  // of each (Step::fresh_grad_params) overwrites it, so no step zeroes them.
  // A trainable parameter no step writes keeps its gradient (zeroed when the
  // state was made, and nothing else writes it).
  kOverwrite,
  // They are added to state.grads (the later microbatches of an
  // accumulated step). Not with a ParamSource: its buffers are the run's own.
  kAccumulate,
};

class Executor {
 public:
  Executor(const Program& program, Schedule schedule, Allocator& allocator, ModelState& state);

  // Runs the schedule on one batch; returns the mean loss. With a backward
  // schedule, the parameter gradients go to state.grads (or the source's
  // buffers) as `gradients` says.
  double run(const Batch& batch, ParamGradients gradients = ParamGradients::kOverwrite);

  // Frees what the last run left allocated (its loss value): an executor
  // that shares its allocator with another (validation beside training)
  // must leave nothing behind between runs. run() starts with this.
  void release_values();

  const ExecutionCounts& counts() const { return counts_; }
  const Schedule& schedule() const { return schedule_; }
  // Times every step by phase and op kind (counts().seconds_by_op).
  void set_profiling(bool on) { profiling_ = on; }
  // Called before every step; the planner uses it to book memory the CPU
  // engine does not have (e.g. the unsharded copy of an FSDP unit in flight).
  void set_step_observer(std::function<void(const Step&)> observer) {
    observer_ = std::move(observer);
  }
  bool dry_run() const { return allocator_->counting_only(); }
  // Reads parameters and gradients from `source` (null: the state's own
  // tensors) from the next run on; fp32 programs only. Not owned.
  void set_param_source(ParamSource* source);

 private:
  void record_time(const Step& step, std::chrono::steady_clock::time_point run_start,
                   std::chrono::steady_clock::time_point start);
  void forward(const Node& node, int32_t index, bool recompute, const Batch& batch);
  void backward(const Step& step, const Batch& batch);
  // The gradient buffer of `v`, allocated on first use: zeroed, or left as it
  // is when `fresh` (its first writer overwrites it, OpBuffers).
  Tensor& grad_of(ValueId v, bool fresh);
  // A kernel's scratch for one step, booked as temporaries (none for 0 bytes).
  Tensor scratch(int64_t bytes);
  // The inputs of `node` whose gradient its backward is the first to write
  // and can take fresh.
  uint32_t fresh_grad_inputs(const Node& node) const;
  // Sets b's input gradients for `node`'s backward step: fresh bits, buffers
  // (in place of dying inputs, Step::grads_over_inputs), and none for the
  // input the output's gradient becomes, whose index it returns (or -1).
  int input_gradients(const Step& step, const Node& node, OpBuffers& b);
  // Which bf16 buffers `node`'s kernels take (see above).
  Bf16Use bf16_use(const Node& node) const;
  // The buffer a kernel reads for `value`: the value itself, or (bf16 value,
  // fp32 kernel) an fp32 copy appended to `staged`.
  const float* kernel_input(const Tensor& value, bool bf16_kernel, std::vector<Tensor>& staged,
                            std::vector<DType>& dtypes);
  // The parameter a kernel reads: the fp32 master, or its bf16 copy.
  const float* weight(ParamId p, bool bf16_kernel);
  // The fp32 master of parameter p and its gradient, where the kernels find them.
  float* master(ParamId p);
  float* gradient(ParamId p);
  // The bf16 weight copies of the run of steps in one gather unit that
  // begins at step `first`.
  void cast_unit_weights(size_t first);
  void release_weight_copies();

  const Program& program_;
  Schedule schedule_;
  Allocator* allocator_;
  ModelState& state_;
  Backend& backend_;  // the state's: every kernel runs through it
  std::vector<Tensor> values_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> weight_copies_;   // by ParamId: bf16 copies in the current unit
  std::vector<ParamId> copied_params_;  // those of weight_copies_ that hold a copy
  ExecutionCounts counts_;
  std::string label_;
  double loss_ = 0;
  bool profiling_ = false;
  ParamGradients param_gradients_ = ParamGradients::kOverwrite;  // this run's
  std::function<void(const Step&)> observer_;
  ParamSource* source_ = nullptr;
};

}  // namespace remat
