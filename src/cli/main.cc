#include <csignal>

#include "cli/commands.h"
#include "core/host_memory.h"
#include "train/stop_signal.h"

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which
  // the writers report and clean up after (OutputError), instead of the
  // signal killing the process with its temporary half written.
  std::signal(SIGXFSZ, SIG_IGN);
  remat::route_stop_signals_to_own_thread();  // before any thread starts
  remat::keep_malloc_memory_mapped();
  remat::begin_malloc_warm_up();  // training ends it after its warm-up steps
  return remat::run_cli(argc, argv);
}
