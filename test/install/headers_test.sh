#!/usr/bin/env bash
# The installed headers are exactly the public ones (every lib/*/include/**
# header of a library this build has, nothing from src/ or test/) and each
# compiles on its own against the installed tree with only the pkg-config
# Cflags (PKG_CONFIG_SYSROOT_DIR points into a `meson install --destdir`).
#
#   headers_test.sh BUILD_DIR SOURCE_ROOT HAS_VERBS(true|false)
set -uo pipefail
BUILD=${1:?usage: headers_test.sh BUILD_DIR SOURCE_ROOT HAS_VERBS}
ROOT=${2:?usage: headers_test.sh BUILD_DIR SOURCE_ROOT HAS_VERBS}
HAS_VERBS=${3:?usage: headers_test.sh BUILD_DIR SOURCE_ROOT HAS_VERBS}
CXX=${CXX:-c++}
WORK=$(mktemp -d /tmp/mc-headers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
DEST=$WORK/root
t0=$SECONDS

meson install -C "$BUILD" --no-rebuild --quiet --destdir "$DEST" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log" >&2; echo "FAIL - meson install --destdir"; exit 1; }
pc=$(find "$DEST" -name mooncake-p2p.pc | head -1)
[[ -n "$pc" ]] || { echo "FAIL - no mooncake-p2p.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$DEST
INC=$(dirname "$(find "$DEST" -type d -name mc -path '*/include/mc' | head -1)")

# The expected set: the source tree's public headers (lib/verbs only with RDMA).
(cd "$ROOT/lib" && for d in */include; do
   [[ $d == verbs/include && $HAS_VERBS != true ]] && continue
   (cd "$d" && find mc -type f)
 done) | sort >"$WORK/expected"
(cd "$INC" && find . -type f | sed 's|^\./||') | sort >"$WORK/installed"
fails=0
if diff -u "$WORK/expected" "$WORK/installed"; then
  echo "ok   - the installed headers are exactly the $(wc -l <"$WORK/expected") public headers"
else
  echo "FAIL - the installed headers differ from lib/*/include (diff above: - missing, + extra)"
  fails=1
fi

# Each installed header alone, against the installed tree only: the source
# tree is not on the include path (the compile runs in $WORK).
cflags=$(pkg-config --cflags mooncake-p2p)
export CXX cflags WORK
if (cd "$WORK" && xargs -P 2 -I{} bash -c \
      'f={}; printf "#include <%s>\n#include <%s>\n" "$f" "$f" >"$WORK/${f//\//_}.cpp";
       $CXX $cflags -Wall -Wextra -Werror -fsyntax-only "$WORK/${f//\//_}.cpp" 2>"$WORK/${f//\//_}.err" ||
         { echo "FAIL - $f does not compile alone:"; head -20 "$WORK/${f//\//_}.err"; exit 1; }' \
      <"$WORK/installed"); then
  echo "ok   - every installed header compiles on its own (and twice: include guards)"
else
  fails=1
fi
echo "headers test: $((SECONDS - t0)) s"
exit $fails
