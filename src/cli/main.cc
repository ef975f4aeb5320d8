#include "cli/commands.h"
#include "core/host_memory.h"

int main(int argc, char** argv) {
  remat::keep_malloc_memory_mapped();
  return remat::run_cli(argc, argv);
}
