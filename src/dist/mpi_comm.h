// The MPI communicator behind world() (dist/comm.h): MPI_COMM_WORLD of an
// Open MPI job. Internal to src/dist.
#pragma once

#include <memory>

#include "dist/comm.h"

namespace remat {

// Initialises MPI (once per process; MPI_Finalize runs when the returned
// communicator is destroyed). CommError when MPI cannot start.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace remat
