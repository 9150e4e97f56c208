#!/usr/bin/env bash
# deploy/nearprepd.service: `systemd-analyze verify` finds nothing to say
# (with and without the FPGA drop-in), and `systemd-analyze security
# --offline=yes` rates its exposure at most $MAX_EXPOSURE (2.0) both ways.
# verify checks that ExecStart's binary exists, so the unit is verified with
# ExecStart pointing at the built nearprepd (argument 2).
# The unit's comment states both exposure figures ("N.N for this unit
# alone, N.N with the FPGA drop-in"): they must be the measured ones. With
# BUILD_DIR, every file:// Documentation= path under /usr/local must be
# installed by `cmake --install BUILD_DIR --component doc`.
# Usage: systemd_unit_test.sh SOURCE_DIR NEARPREPD_BINARY [BUILD_DIR]
set -euo pipefail
src="$1"
bin="$2"
build="${3:-}"
MAX_EXPOSURE="${MAX_EXPOSURE:-2.0}"
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed"; exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0

check() {  # check NAME UNIT_FILE STATED_EXPOSURE
  local name="$1" unit="$2" stated="$3" out exposure
  if ! out="$(systemd-analyze verify "$unit" 2>&1)" || [ -n "$out" ]; then
    echo "FAIL $name: systemd-analyze verify:"; echo "$out"; fail=1
  else
    echo "ok   $name: systemd-analyze verify is silent"
  fi
  out="$(systemd-analyze security --offline=yes --no-pager "$unit" 2>&1)" || true
  exposure="$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
  if [ -z "$exposure" ]; then
    echo "FAIL $name: no exposure level in:"; echo "$out"; fail=1; return
  fi
  if [ "$exposure" != "$stated" ]; then
    echo "FAIL $name: the unit's comment states exposure '$stated', measured $exposure"; fail=1
  else
    echo "ok   $name: measured exposure $exposure is the one the comment states"
  fi
  if awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }'; then
    echo "ok   $name: exposure $exposure <= $MAX_EXPOSURE"
  else
    echo "FAIL $name: exposure $exposure > $MAX_EXPOSURE"
    printf '%s\n' "$out" | grep '✗' || true
    fail=1
  fi
}

mkdir -p "$work/plain" "$work/fpga/nearprepd.service.d"
sed "s|^ExecStart=/usr/local/bin/nearprepd|ExecStart=$bin|" \
  "$src/deploy/nearprepd.service" > "$work/plain/nearprepd.service"
grep -q "^ExecStart=$bin " "$work/plain/nearprepd.service" || {
  echo "FAIL: ExecStart=/usr/local/bin/nearprepd not found in the unit"; exit 1; }
cp "$work/plain/nearprepd.service" "$work/fpga/"
cp "$src/deploy/nearprepd.service.d/fpga.conf" "$work/fpga/nearprepd.service.d/"
comment="$(sed -n 's/^# *//p' "$src/deploy/nearprepd.service" | tr '\n' ' ')"
stated_plain="$(printf '%s' "$comment" | sed -n 's/.* \([0-9][0-9.]*\) for this unit alone.*/\1/p')"
stated_fpga="$(printf '%s' "$comment" | sed -n 's/.* \([0-9][0-9.]*\) with the FPGA drop-in.*/\1/p')"
check "nearprepd.service" "$work/plain/nearprepd.service" "$stated_plain"
check "nearprepd.service + fpga.conf" "$work/fpga/nearprepd.service" "$stated_fpga"
# The drop-in really applies (the device ACL shows up in the analysis).
if ! systemd-analyze security --offline=yes --json=short "$work/fpga/nearprepd.service" 2>&1 \
    | grep -q '/dev/dri/renderD128:rw'; then
  echo "FAIL: fpga.conf not applied"; fail=1
fi
# sd_notify and the watchdog are what the daemon implements.
for key in "Type=notify" "NotifyAccess=main" "WatchdogSec="; do
  grep -q "^$key" "$src/deploy/nearprepd.service" || { echo "FAIL: no $key"; fail=1; }
done
# Documentation= names files that the install rules install.
docs="$(sed -n 's/^Documentation=//p' "$src/deploy/nearprepd.service" | tr ' ' '\n' | grep . || true)"
[ -n "$docs" ] || { echo "FAIL: no Documentation="; fail=1; }
if [ -n "$build" ]; then
  cmake --install "$build" --component doc --prefix "$work/usr/local" >/dev/null
  for url in $docs; do
    case "$url" in
      file:///usr/local/*)
        if [ -f "$work${url#file://}" ]; then
          echo "ok   Documentation=$url is installed (component doc)"
        else
          echo "FAIL: Documentation=$url: not installed by cmake --install --component doc"; fail=1
        fi ;;
      https://*|man:*) echo "ok   Documentation=$url (not a local file)";;
      *) echo "FAIL: Documentation=$url: neither under /usr/local nor a URL"; fail=1;;
    esac
  done
fi
exit "$fail"
