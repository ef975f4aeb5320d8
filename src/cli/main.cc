#include "cli/commands.h"
#include "core/host_memory.h"
#include "train/stop_signal.h"

int main(int argc, char** argv) {
  remat::route_stop_signals_to_own_thread();  // before any thread starts
  remat::keep_malloc_memory_mapped();
  remat::begin_malloc_warm_up();  // training ends it after its warm-up steps
  return remat::run_cli(argc, argv);
}
