#!/usr/bin/env bash
# Every C++ file of ours as clang-format (.clang-format) writes it.
#
# usage: tests/format_check.sh SOURCE_DIR [--fix]
#   without --fix: lists the files clang-format would change and exits 1 if any (the `format` test);
#   --fix: rewrites them in place (`cmake --build --preset dev --target format`).
set -euo pipefail
src=$1
fix=${2:-}
cd "$src"
mapfile -t files < <(find src include bench tests -path tests/data -prune -o \
  \( -name '*.cc' -o -name '*.h' \) -type f -print | sort)
if [ "$fix" = --fix ]; then
  clang-format -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
unformatted=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then unformatted+=("$f"); fi
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "format: ${#unformatted[@]} of ${#files[@]} files are not as clang-format writes them:"
  printf '  %s\n' "${unformatted[@]}"
  echo "fix: cmake --build --preset dev --target format (or tests/format_check.sh . --fix)"
  exit 1
fi
echo "format: ${#files[@]} files as clang-format writes them"
