// The ISA cap (kernels.h): REMAT_MAX_ISA, read once per process; and whether
// the kernels with an AVX-512 instantiation may run it (internal.h).
#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// OpenBLAS 0.3's cores whose kernels use AVX-512 (its names, lower-cased).
bool avx512_core(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name == "skylakex" || name == "cooperlake" || name == "sapphirerapids";
}

bool read_cap() {
  const char* value = std::getenv("REMAT_MAX_ISA");
  const std::string cap = value == nullptr ? "" : value;
  if (cap.empty()) return false;
  if (cap != "avx2") {
    throw InputError("REMAT_MAX_ISA=\"" + cap + "\": expected avx2 or unset");
  }
  // OpenBLAS chose its kernels when it was loaded, before any of our code
  // ran: only its own variable can cap them.
  const std::string core = openblas_get_corename();
  if (avx512_core(core)) {
    throw InputError("REMAT_MAX_ISA=avx2, but OpenBLAS runs its AVX-512 kernels (" + core +
                     "): also set OPENBLAS_CORETYPE=Haswell");
  }
  return true;
}

}  // namespace

bool isa_capped_at_avx2() {
  static const bool capped = read_cap();
  return capped;
}

namespace detail {

bool avx512_kernels() {
  static const bool use = !isa_capped_at_avx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return use;
}

}  // namespace detail

}  // namespace remat::cpu
