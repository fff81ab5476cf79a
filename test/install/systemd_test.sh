#!/usr/bin/env bash
# The systemd units of conf/systemd, as `meson install` installs them (paths
# filled in), pass `systemd-analyze verify` (no running systemd needed): the
# unit syntax, the ExecStart binaries and config paths they name exist in the
# installed tree; no warning. A unit naming a missing binary or with a bad
# value must fail the same check (the check can fail).
#
#   systemd_test.sh BUILD_DIR
set -uo pipefail
BUILD=${1:?usage: systemd_test.sh BUILD_DIR}
command -v systemd-analyze >/dev/null || { echo "FAIL - systemd-analyze missing (scripts/install-deps.sh installs systemd)"; exit 1; }
WORK=$(mktemp -d /tmp/mc-systemd.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
DEST=$WORK/root
fails=0
check() { local what=$1; shift; if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=1; fi; }

meson install -C "$BUILD" --no-rebuild --quiet --destdir "$DEST" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log" >&2; echo "FAIL - meson install --destdir"; exit 1; }
UNITDIR=$(dirname "$(find "$DEST" -path '*/lib/systemd/system/mooncake-master.service' | head -1)")
[[ -d $UNITDIR ]] || { echo "FAIL - no unit installed under lib/systemd/system"; exit 1; }
# The units name absolute installed paths (/usr/local/bin/...): verify copies
# whose ExecStart paths point into the destdir, so the binaries they name are
# checked (ExecStartPost's /usr/bin/curl stays the host's).
mkdir -p "$WORK/units"
for u in mooncake-master.service mooncake-client.service; do
  check "$u is installed" test -f "$UNITDIR/$u"
  sed -E "/^ExecStart=/s#(=| )/#\1$DEST/#g" "$UNITDIR/$u" >"$WORK/units/$u"
  check "$u names the installed binary and config" bash -c \
    "bin=\$(sed -n 's/^ExecStart=\([^ ]*\) --config \([^ ]*\)$/\1/p' '$WORK/units/$u') &&
     cfg=\$(sed -n 's/^ExecStart=\([^ ]*\) --config \([^ ]*\)$/\2/p' '$WORK/units/$u') &&
     [[ -x \$bin && -f \$cfg ]]"
  # The master's start check is /livez (a standby's /health is 503), the client's /health.
  check "$u declares a restart policy and a /health or /livez readiness poll" bash -c \
    "grep -qx 'Restart=on-failure' '$WORK/units/$u' && grep -q '^ExecStartPost=/usr/bin/curl' '$WORK/units/$u' &&
     grep -Eq '^Environment=MC_HEALTH_URL=http://127.0.0.1:[0-9]*/(health|livez)$' '$WORK/units/$u'"
done
(cd "$WORK/units" && systemd-analyze verify --man=no ./mooncake-master.service ./mooncake-client.service) \
  >"$WORK/verify.log" 2>&1
rc=$?
# Unknown keys and bad values are only warnings (rc 0): require no output too.
check "systemd-analyze verify accepts both units without a warning" bash -c "[[ $rc == 0 && ! -s '$WORK/verify.log' ]]"
cat "$WORK/verify.log"
# The client's HTTP port: http_port when the config sets it, else derived from
# client_rpc_port (9080 + (client_rpc_port - 12345), see README "Running nodes").
check "the health ports in the units match the installed configs" bash -c "
  etc=\$(dirname \"\$(find '$DEST' -path '*/mooncake/master.toml' | head -1)\") &&
  m=\$(sed -n 's/^metrics_port = \([0-9]*\).*/\1/p' \"\$etc/master.toml\") &&
  c=\$(sed -n 's/^http_port = \([0-9]*\).*/\1/p' \"\$etc/client.toml\") &&
  r=\$(sed -n 's/^client_rpc_port = \([0-9]*\).*/\1/p' \"\$etc/client.toml\") &&
  c=\${c:-\$((9080 + r - 12345))} &&
  grep -q \"^Environment=MC_HEALTH_URL=http://127.0.0.1:\$m/livez\" '$WORK/units/mooncake-master.service' &&
  grep -q \"^Environment=MC_HEALTH_URL=http://127.0.0.1:\$c/health\" '$WORK/units/mooncake-client.service'"

# Negative control: the same check on a unit whose binary is missing fails.
mkdir -p "$WORK/broken"
sed "s|/bin/mooncake_master|/bin/no_such_binary|" "$WORK/units/mooncake-master.service" >"$WORK/broken/mooncake-master.service"
(cd "$WORK/broken" && systemd-analyze verify --man=no ./mooncake-master.service) >/dev/null 2>&1
check "systemd-analyze verify rejects a unit naming a missing binary" test "$?" != 0
sed "s|^Restart=on-failure|Restart=sometimes|" "$WORK/units/mooncake-client.service" >"$WORK/broken/mooncake-client.service"
(cd "$WORK/broken" && systemd-analyze verify --man=no ./mooncake-client.service) >"$WORK/broken.log" 2>&1
check "systemd-analyze verify warns about a bad Restart= value" grep -qi "restart specifier" "$WORK/broken.log"
exit $fails
