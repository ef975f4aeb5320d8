#include "dist/mpi_comm.h"

// Open MPI's deprecated C++ bindings are not used (the C API is).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace remat {

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

void check(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw CommError(what + ": " + mpi_error_text(code));
}

// MPI counts are int: a larger exchange would need splitting, which nothing
// this engine runs needs yet.
int mpi_count(int64_t n, const std::string& what) {
  if (n > INT_MAX) throw CommError(what + ": " + std::to_string(n) + " elements in one message");
  return static_cast<int>(n);
}

class MpiRequest : public CommRequest {
 public:
  MpiRequest(Communicator& comm, std::string what) : CommRequest(comm, std::move(what)) {}
  ~MpiRequest() override {
    // A request abandoned by an exception: its rank is about to abort.
    if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
  }
  MPI_Request* handle() { return &request_; }

 private:
  bool test() override {
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }

  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The reduce-scatter is an all-to-all (rank r receives every rank's chunk r)
// followed by the sum in rank order, so the result does not depend on which
// reduction algorithm MPI would pick.
class ReduceScatterRequest final : public MpiRequest {
 public:
  ReduceScatterRequest(Communicator& comm, std::string what, float* out, int64_t chunk)
      : MpiRequest(comm, std::move(what)),
        out_(out),
        chunk_(chunk),
        ranks_(comm.size()),
        received_(static_cast<size_t>(chunk * comm.size())) {}
  float* received() { return received_.data(); }

 private:
  void finish() override {
    for (int64_t i = 0; i < chunk_; ++i) out_[i] = received_[static_cast<size_t>(i)];
    for (int r = 1; r < ranks_; ++r) {
      const float* part = received_.data() + r * chunk_;
      for (int64_t i = 0; i < chunk_; ++i) out_[i] += part[i];
    }
  }

  float* out_;
  int64_t chunk_;
  int ranks_;
  std::vector<float> received_;
};

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD: initialises MPI, finalised with this communicator.
  MpiCommunicator() {
    int provided = 0;
    // Only the training thread calls MPI (OpenMP workers never do).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    world_ = true;
    adopt(MPI_COMM_WORLD);
  }
  // A communicator split from another (split()); freed with this one.
  explicit MpiCommunicator(MPI_Comm comm) { adopt(comm); }
  ~MpiCommunicator() override {
    MPI_Comm_free(&lane1_);
    if (!world_) MPI_Comm_free(&comm_);
    if (world_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool launched_by_mpi() const override { return true; }

  std::unique_ptr<Communicator> split(int color) override {
    MPI_Comm part = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, rank_, &part), "MPI_Comm_split");
    auto split = std::make_unique<MpiCommunicator>(part);
    split->set_timeout(timeout());
    return split;
  }

  std::unique_ptr<CommRequest> start_reduce_scatter(const float* in, float* out, int64_t chunk,
                                                    std::string what) override {
    auto request = std::make_unique<ReduceScatterRequest>(*this, what, out, chunk);
    const int count = mpi_count(chunk, what);
    check(MPI_Ialltoall(in, count, MPI_FLOAT, request->received(), count, MPI_FLOAT, comm_,
                        request->handle()),
          what);
    return request;
  }

  std::unique_ptr<CommRequest> start_all_gather(const void* in, void* out, int64_t bytes,
                                                std::string what, int lane) override {
    auto request = std::make_unique<MpiRequest>(*this, what);
    const int count = mpi_count(bytes, what);
    check(MPI_Iallgather(in, count, MPI_BYTE, out, count, MPI_BYTE, lane == 1 ? lane1_ : comm_,
                         request->handle()),
          what);
    return request;
  }

  std::unique_ptr<CommRequest> start_barrier(std::string what) override {
    auto request = std::make_unique<MpiRequest>(*this, what);
    check(MPI_Ibarrier(comm_, request->handle()), what);
    return request;
  }

  [[noreturn]] void abort(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);  // MPI_Abort does not return; this keeps [[noreturn]] true
  }

 private:
  void adopt(MPI_Comm comm) {
    comm_ = comm;
    // Errors come back as codes, which become CommError with MPI's text.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    check(MPI_Comm_dup(comm_, &lane1_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(lane1_, MPI_ERRORS_RETURN);
  }

  bool world_ = false;
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm lane1_ = MPI_COMM_NULL;  // the all-reduces' all-gathers
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace remat
