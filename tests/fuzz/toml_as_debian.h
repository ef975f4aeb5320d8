// Force-included (-include) into the fuzz build of remat's sources, before
// toml++, which the fuzz build compiles header-only so that the fuzzer sees
// its coverage and the sanitizers watch its memory.
//
// remat links Debian's libtomlplusplus (3.3.0, built with gcc and NDEBUG):
// there toml++'s internal assertions, and its "assert-assume" preconditions,
// compile to nothing (gcc 12 has no __builtin_assume). The fuzz build does the
// same, so it tests the parser remat runs: TOML_ASSERT is a no-op, and since
// NDEBUG stays undefined, TOML_ASSERT_ASSUME expands to TOML_ASSERT rather
// than to clang's __builtin_assume (which would make a broken precondition
// undefined behaviour the sanitizers cannot see). Everything else, the
// __builtin_unreachable() of toml++'s Unicode tables included, is still
// checked by ASan and UBSan.
//
// toml++ 3.3.0 breaks its own preconditions on some malformed input ("[=",
// "t = [}", a date-time with a NUL after its 'T'); its parser then reports a
// syntax error, so remat exits 2 (tests/io/config_test.cc). Where a broken
// precondition reached real undefined behaviour, remat's lexical pre-scan
// (src/io/config_toml.cc, check_toml_lexically_safe) keeps the input from toml++.
#pragma once

#define TOML_ASSERT(expr) static_cast<void>(0)
