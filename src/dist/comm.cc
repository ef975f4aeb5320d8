#include "dist/comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include "dist/mpi_comm.h"

namespace remat {

bool CommRequest::poll() {
  if (!done_ && test()) {
    finish();
    done_ = true;
  }
  return done_;
}

void CommRequest::wait() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  // Poll, then back off to short sleeps: MPI progresses only inside MPI
  // calls, and a rank that spins would take a core from a peer that still
  // computes on an oversubscribed machine.
  for (int polls = 0; !poll(); ++polls) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > comm_.timeout()) {
      comm_.wait_seconds_ += waited;
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", comm_.timeout());
      throw CommError("the " + what_ + " did not complete within " + seconds +
                      " s (the collective timeout): another rank died, hangs or was stopped");
    }
    if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  comm_.wait_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

// Each element is summed once, in rank order, by its chunk's owner, so
// every rank ends with the same bits: a reduce-scatter, then an all-gather
// of the summed chunks, then the copy back.
class Communicator::AllreduceRequest final : public CommRequest {
 public:
  AllreduceRequest(Communicator& comm, std::string what, float* data, int64_t n)
      : CommRequest(comm, std::move(what)),
        data_(data),
        n_(n),
        ticket_(comm.allreduces_started_++) {
    const int64_t ranks = comm.size();
    chunk_ = (n + ranks - 1) / ranks;
    padded_.assign(static_cast<size_t>(chunk_ * ranks), 0.0f);
    std::copy(data, data + n, padded_.begin());
    mine_.resize(static_cast<size_t>(chunk_));
    step_ = comm.start_reduce_scatter(padded_.data(), mine_.data(), chunk_, this->what());
  }

 private:
  bool test() override {
    if (!step_->poll()) return false;
    if (gathering_) return true;
    // The reduce-scatters finish in any order; the all-gathers start in
    // ticket order, the same on every rank.
    if (comm().allreduces_gathering_ != ticket_) return false;
    ++comm().allreduces_gathering_;
    gathering_ = true;
    step_ = comm().start_all_gather(mine_.data(), padded_.data(),
                                    chunk_ * static_cast<int64_t>(sizeof(float)), what(), 1);
    return step_->poll();
  }
  void finish() override { std::copy(padded_.begin(), padded_.begin() + n_, data_); }

  float* data_;
  int64_t n_, ticket_, chunk_ = 0;
  std::vector<float> padded_, mine_;
  std::unique_ptr<CommRequest> step_;  // the reduce-scatter, then the all-gather
  bool gathering_ = false;
};

std::unique_ptr<CommRequest> Communicator::start_allreduce_sum(float* data, int64_t n,
                                                               std::string what) {
  return std::make_unique<AllreduceRequest>(*this, std::move(what), data, n);
}

double Communicator::sum(double value, const std::string& what) {
  const std::vector<double> all = all_gather(value, what);
  double total = 0;
  for (double v : all) total += v;  // rank order
  return total;
}

int64_t Communicator::min(int64_t value, const std::string& what) {
  const std::vector<int64_t> all = all_gather(value, what);
  return *std::min_element(all.begin(), all.end());
}

int64_t Communicator::max(int64_t value, const std::string& what) {
  const std::vector<int64_t> all = all_gather(value, what);
  return *std::max_element(all.begin(), all.end());
}

namespace {

// The one agreement collective: the lowest rank that saw bad input, or
// size() when none did.
int64_t first_rejecting_rank(Communicator& comm, bool rejects) {
  return comm.min(rejects ? comm.rank() : comm.size(), "agreement on the inputs of the run");
}

}  // namespace

void confirm_inputs(Communicator& comm) {
  const int64_t first = first_rejecting_rank(comm, false);
  if (first < comm.size()) throw InputsRejected(static_cast<int>(first));
  comm.inputs_confirmed_ = true;
}

bool reject_inputs(Communicator& comm) { return first_rejecting_rank(comm, true) == comm.rank(); }

namespace {

// A collective that completed when it was started.
class DoneRequest final : public CommRequest {
 public:
  using CommRequest::CommRequest;

 private:
  bool test() override { return true; }
};

// One process: every collective is a copy.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool launched_by_mpi() const override { return false; }
  std::unique_ptr<Communicator> split(int) override {
    auto one = std::make_unique<SingleProcess>();
    one->set_timeout(timeout());
    return one;
  }
  std::unique_ptr<CommRequest> start_reduce_scatter(const float* in, float* out, int64_t chunk,
                                                    std::string what) override {
    if (in != out) std::memmove(out, in, static_cast<size_t>(chunk) * sizeof(float));
    return std::make_unique<DoneRequest>(*this, std::move(what));
  }
  std::unique_ptr<CommRequest> start_all_gather(const void* in, void* out, int64_t bytes,
                                                std::string what, int) override {
    if (in != out) std::memmove(out, in, static_cast<size_t>(bytes));
    return std::make_unique<DoneRequest>(*this, std::move(what));
  }
  std::unique_ptr<CommRequest> start_barrier(std::string what) override {
    return std::make_unique<DoneRequest>(*this, std::move(what));
  }
  [[noreturn]] void abort(int status) override { std::exit(status); }
};

bool launched_by_mpi_launcher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace

Communicator& world() {
  static const std::unique_ptr<Communicator> comm =
      launched_by_mpi_launcher() ? make_mpi_communicator()
                                 : std::unique_ptr<Communicator>(new SingleProcess);
  return *comm;
}

int local_ranks() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n = local ? std::atoi(local) : 1;
  return std::max(1, n);
}

}  // namespace remat
