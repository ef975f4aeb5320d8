#!/usr/bin/env bash
# Every C++ file of the project is formatted as .clang-format says
# (clang-format-14, installed by `make test`). Fix with `make format`.
# Run from the repository root (ctest does); the argument (remat's path) is
# not needed.
set -euo pipefail
formatter=clang-format-14
command -v "$formatter" >/dev/null || {
  echo "test_format: $formatter is not installed (make deps installs it)" >&2
  exit 1
}
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' 2>/dev/null ||
                     find src tests -name '*.cc' -o -name '*.h')
if [ "${#files[@]}" -lt 50 ]; then
  echo "test_format: found only ${#files[@]} C++ files; is this the repository root?" >&2
  exit 1
fi
# Self-check: a badly formatted snippet must be reported, so a formatter
# that silently accepts everything fails this test.
if printf 'int  main( ){return 0;}\n' | "$formatter" --style=file:.clang-format \
     --assume-filename=x.cc --dry-run --Werror >/dev/null 2>&1; then
  echo "test_format: the self-check snippet was not reported" >&2
  exit 1
fi
if ! "$formatter" --dry-run --Werror "${files[@]}"; then
  echo "test_format: the files above are not formatted; run 'make format'" >&2
  exit 1
fi
echo "test_format: ${#files[@]} files formatted"
