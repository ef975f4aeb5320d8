// Communication between the ranks of a data-parallel run: a thin layer over
// MPI (Open MPI) with a single-process implementation, so the trainer is
// written once for both. Nothing above this folder includes <mpi.h>.
//
// Contracts:
//  - every rank starts the same collectives in the same order with the same
//    sizes (MPI's rule); a collective is identified by its start order;
//  - sums are deterministic and independent of MPI's algorithm choice:
//    element i of a sum is ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order,
//    the same bits on every rank and in every run at the same size();
//  - every wait is bounded by the communicator's timeout: a peer that died
//    or hangs makes the wait throw CommError (naming the collective and the
//    timeout) instead of blocking forever;
//  - a failed rank ends the whole job with abort(), never by returning alone
//    while its peers wait in a collective.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace remat {

// A collective that failed or did not finish within the timeout.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

class Communicator;

// A non-blocking collective in flight. Its buffers must stay valid and
// untouched until wait() returns.
class CommRequest {
 public:
  CommRequest(Communicator& comm, std::string what) : comm_(comm), what_(std::move(what)) {}
  virtual ~CommRequest() = default;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;

  // Blocks until the collective has completed on this rank, then does its
  // local part (e.g. the ordered sum of a reduce-scatter). CommError when it
  // does not complete within the communicator's timeout, or fails.
  void wait();
  // Drives the collective without blocking (MPI progresses only inside MPI
  // calls); true once it has completed, local part included.
  bool poll();

 protected:
  // Drives the transport; true once this rank's part of the exchange is done.
  virtual bool test() = 0;
  virtual void finish() {}
  Communicator& comm() const { return comm_; }
  const std::string& what() const { return what_; }

 private:
  Communicator& comm_;
  std::string what_;  // for messages: "all-reduce of the gradients"
  bool done_ = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether this process was started by an MPI launcher (even with -np 1).
  virtual bool launched_by_mpi() const = 0;
  // A communicator of the ranks that pass the same `color` (>= 0), ranked
  // in the order of their ranks here, with this one's timeout. Every rank
  // calls it, at the same point of the run; it blocks until all have.
  virtual std::unique_ptr<Communicator> split(int color) = 0;

  // The bound on every wait from now on, in seconds (> 0).
  void set_timeout(double seconds) { timeout_seconds_ = seconds; }
  double timeout() const { return timeout_seconds_; }
  // Total seconds spent blocked in wait() (the communication not hidden
  // behind compute), since construction.
  double wait_seconds() const { return wait_seconds_; }

  // Reduce-scatter of `in` (size() * chunk floats, chunk r going to rank r)
  // into `out` (chunk floats): out = the rank-ordered sum of every rank's
  // chunk rank().
  virtual std::unique_ptr<CommRequest> start_reduce_scatter(const float* in, float* out,
                                                            int64_t chunk, std::string what) = 0;
  // All-gather: `out` (size() * bytes) receives every rank's `in` (bytes
  // bytes) in rank order. `lane` 1 runs it on a second communicator, whose
  // collectives are ordered among themselves only.
  virtual std::unique_ptr<CommRequest> start_all_gather(const void* in, void* out, int64_t bytes,
                                                        std::string what, int lane = 0) = 0;
  virtual std::unique_ptr<CommRequest> start_barrier(std::string what) = 0;

  // data (n floats) = the rank-ordered sum of every rank's data: a
  // reduce-scatter of equal chunks (the tail padded), then an all-gather on
  // lane 1. All-reduces in flight complete in the order they were started
  // (each all-gather starts after the earlier ones, so every rank starts them
  // in one order): wait on them in that order, or poll them all.
  std::unique_ptr<CommRequest> start_allreduce_sum(float* data, int64_t n, std::string what);

  // Blocking helpers over the non-blocking collectives.
  void allreduce_sum(float* data, int64_t n, const std::string& what) {
    start_allreduce_sum(data, n, what)->wait();
  }
  // Every rank's value, in rank order.
  template <typename T>
  std::vector<T> all_gather(T value, const std::string& what) {
    std::vector<T> all(static_cast<size_t>(size()));
    start_all_gather(&value, all.data(), sizeof(T), what)->wait();
    return all;
  }
  // The rank-ordered sum of every rank's value (deterministic).
  double sum(double value, const std::string& what);
  int64_t min(int64_t value, const std::string& what);
  int64_t max(int64_t value, const std::string& what);
  void barrier(const std::string& what) { start_barrier(what)->wait(); }

  // Whether confirm_inputs() has returned (see below).
  bool inputs_confirmed() const { return inputs_confirmed_; }

  // Ends every rank of the job with `status` (MPI_Abort); a single process
  // just exits. The caller has printed why.
  [[noreturn]] virtual void abort(int status) = 0;

 private:
  friend class CommRequest;  // adds the seconds its wait blocked
  class AllreduceRequest;
  int64_t allreduces_started_ = 0;    // tickets of the all-reduces, in start order
  int64_t allreduces_gathering_ = 0;  // how many have started their all-gather
  friend void confirm_inputs(Communicator& comm);

  double timeout_seconds_ = 300;
  double wait_seconds_ = 0;
  bool inputs_confirmed_ = false;
};

// Bad input seen on any rank ends every rank with exit status 2 and its
// message printed once. Until the inputs are agreed, ranks run no other
// collective but the agreement; each rank makes one of these calls at each
// agreement, and they match as one collective:
//  - agree_on_settings() first, before anything is planned or written:
//    returns when every rank was given the same `settings` (name, value:
//    the job's config), else throws InputsRejected (a rank saw bad input
//    before it got there) or RanksDisagree (every rank throws it, naming
//    the first setting that differs; the caller reports it as bad input,
//    which is the next agreement). The inputs are not confirmed yet;
//  - confirm_inputs() once its own inputs passed every check: returns when
//    every rank's did, else throws InputsRejected (the message is printed by
//    the rank that saw it);
//  - reject_inputs() from its error handler: returns whether this rank is
//    the lowest that saw bad input, the one that prints its message.
// After confirm_inputs(), bad input on one rank ends the job with abort(2).
class InputsRejected : public std::runtime_error {
 public:
  explicit InputsRejected(int first_rank)
      : std::runtime_error("rank " + std::to_string(first_rank) + " saw bad input") {}
};
class RanksDisagree : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
using RankSettings = std::vector<std::pair<std::string, std::string>>;
// The digest agree_on_settings() compares (FNV-1a of each name and value,
// folded in order): equal on every rank once the settings are agreed, so a
// rank can name the job by it without another collective.
uint64_t settings_digest(const RankSettings& settings);
void agree_on_settings(Communicator& comm, const RankSettings& settings);
void confirm_inputs(Communicator& comm);
bool reject_inputs(Communicator& comm);

// The process's communicator: MPI when an MPI launcher started this process
// (Open MPI's OMPI_COMM_WORLD_SIZE or PMIx's PMIX_RANK in the environment),
// else a single-process one on which every collective is a copy. MPI is
// initialised on the first call and finalised at exit; a process started
// without mpirun never touches MPI.
Communicator& world();

// How many ranks of this job run on this machine (1 without MPI): threads
// per rank default to the cores divided by it.
int local_ranks();

}  // namespace remat
