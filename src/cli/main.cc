#include "cli/commands.h"

int main(int argc, char** argv) { return remat::run_cli(argc, argv); }
