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

// What each rank brings to the agreement.
struct Agreement {
  int64_t rejects = 0;   // 1: this rank saw bad input
  int64_t settings = 0;  // how many settings it was given
  uint64_t digest = 0;   // of all of them
};

// FNV-1a: a digest to compare, not a defence against anyone.
uint64_t digest_of(const std::string& text, uint64_t h = 1469598103934665603ULL) {
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

uint64_t digest_of(const std::pair<std::string, std::string>& setting) {
  return digest_of(setting.second, digest_of(setting.first + '\0'));
}

// The one agreement collective: every rank's word, in rank order.
std::vector<Agreement> agree(Communicator& comm, const Agreement& mine) {
  return comm.all_gather(mine, "agreement on the inputs of the run");
}

int64_t first_rejecting_rank(Communicator& comm, const std::vector<Agreement>& all) {
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].rejects) return static_cast<int64_t>(r);
  return comm.size();
}

// Every rank got here with the same settings count and different digests:
// a second collective (every rank is in agree_on_settings) finds the first
// setting that differs, which every rank names with its own value.
[[noreturn]] void name_the_difference(Communicator& comm, const RankSettings& settings) {
  const size_t n = settings.size();
  std::vector<uint64_t> mine(n), all(n * static_cast<size_t>(comm.size()));
  for (size_t i = 0; i < n; ++i) mine[i] = digest_of(settings[i]);
  comm.start_all_gather(mine.data(), all.data(), static_cast<int64_t>(n * sizeof(uint64_t)),
                        "which setting differs between the ranks")
      ->wait();
  for (size_t i = 0; i < n; ++i) {
    std::string others;
    for (int r = 0; r < comm.size(); ++r)
      if (all[static_cast<size_t>(r) * n + i] != mine[i])
        others += (others.empty() ? "" : ", ") + std::to_string(r);
    if (others.empty()) continue;
    throw RanksDisagree(settings[i].first + " = " + settings[i].second + " on rank " +
                        std::to_string(comm.rank()) + ", another value on rank(s) " + others +
                        ": every rank of a job must be given the same config (expected the "
                        "same config file and overrides on every rank)");
  }
  throw RanksDisagree(
      "the ranks' settings differ, but no one setting does (expected the same "
      "config on every rank)");
}

}  // namespace

uint64_t settings_digest(const RankSettings& settings) {
  uint64_t digest = 0;
  for (const auto& setting : settings) digest = digest * 31 + digest_of(setting);
  return digest;
}

void agree_on_settings(Communicator& comm, const RankSettings& settings) {
  Agreement mine;
  mine.settings = static_cast<int64_t>(settings.size());
  mine.digest = settings_digest(settings);
  const std::vector<Agreement> all = agree(comm, mine);
  const int64_t first = first_rejecting_rank(comm, all);
  if (first < comm.size()) throw InputsRejected(static_cast<int>(first));
  bool same = true;
  for (const Agreement& a : all)
    same = same && a.settings == mine.settings && a.digest == mine.digest;
  if (!same) {
    for (const Agreement& a : all)
      if (a.settings != mine.settings)
        throw RanksDisagree("the ranks run remat builds with different config keys (" +
                            std::to_string(mine.settings) + " here, " + std::to_string(a.settings) +
                            " on another rank); expected one build "
                            "on every rank");
    name_the_difference(comm, settings);
  }
}

void confirm_inputs(Communicator& comm) {
  const int64_t first = first_rejecting_rank(comm, agree(comm, Agreement{}));
  if (first < comm.size()) throw InputsRejected(static_cast<int>(first));
  comm.inputs_confirmed_ = true;
}

bool reject_inputs(Communicator& comm) {
  Agreement mine;
  mine.rejects = 1;
  return first_rejecting_rank(comm, agree(comm, mine)) == comm.rank();
}

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
