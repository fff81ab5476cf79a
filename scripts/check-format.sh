#!/usr/bin/env bash
# The tree is formatted with the repository's .clang-format (Debian bookworm's
# clang-format 14). `check-format.sh` lists every C++ file clang-format would
# change and fails; `check-format.sh --fix` rewrites them (`make format`).
# Files: every tracked *.cpp, *.hpp, *.h outside subprojects/ (or, outside a
# git checkout, every such file under lib apps python bench test examples).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
CF=${CLANG_FORMAT:-clang-format}
command -v "$CF" >/dev/null || { echo "FAIL - $CF not found (scripts/install-deps.sh installs clang-format)"; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' | grep -v '^subprojects/')
else
  mapfile -t files < <(find lib apps python bench test examples -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) | sort)
fi
((${#files[@]})) || { echo "FAIL - no C++ files found"; exit 1; }
if [[ "${1:-}" == "--fix" ]]; then
  "$CF" -i --style=file "${files[@]}"
  echo "formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$CF" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'not formatted (run `make format`):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "FAIL - ${#bad[@]} of ${#files[@]} files"
  exit 1
fi
echo "ok - ${#files[@]} files formatted ($("$CF" --version | head -1))"
