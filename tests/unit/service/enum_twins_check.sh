#!/usr/bin/env bash
# ctest enum_twins_check: a value added to any enum of nearprep.proto without
# its server-side twin does not compile. Compiles
# server/service/request_validation.cc (its static_asserts) with the
# service library's flags, -fsyntax-only, against a nearprep.pb.h generated
# from a copy of the proto in which every enum has one more value: it must
# fail, naming each enum ("v1::CropMode gained a value: ..."). A new enum
# without asserts fails here too. (That it compiles against the real proto
# is the build's own check.)
#   tests/unit/service/enum_twins_check.sh <build dir> <protoc> <c++ compiler>
# Run from the source root. Exit 77 (skipped) without Makefile flags.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
PROTOC=$2
CXX=$3
FLAGS="$BUILD/server/service/CMakeFiles/nearprep_service.dir/flags.make"
[ -f "$FLAGS" ] || { echo "no $FLAGS (not a Makefile build): skipped"; exit 77; }
DEFINES=$(sed -n 's/^CXX_DEFINES = //p' "$FLAGS")
INCLUDES=$(sed -n 's/^CXX_INCLUDES = //p' "$FLAGS")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nearprep-enum-twins.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
compile() {  # $1: folder holding nearprep/v1/nearprep.pb.h
  # shellcheck disable=SC2086
  "$CXX" -std=c++17 -fsyntax-only $DEFINES -I"$1" \
    ${INCLUDES//-I$BUILD\/proto\/gen/-I$1} server/service/request_validation.cc
}

mkdir -p "$TMP/proto/nearprep/v1" "$TMP/gen"
# One more value (number 99) at the end of every enum.
awk '/^enum [A-Za-z]+ \{/ { name = $2 }
     name != "" && /^\}/ { print "  " toupper(name) "_ADDED_BY_TEST = 99;"; name = "" }
     { print }' proto/nearprep/v1/nearprep.proto > "$TMP/proto/nearprep/v1/nearprep.proto"
"$PROTOC" --proto_path="$TMP/proto" --cpp_out="$TMP/gen" "$TMP/proto/nearprep/v1/nearprep.proto"
ENUMS=$(sed -n 's/^enum \([A-Za-z]*\) {.*/\1/p' proto/nearprep/v1/nearprep.proto)
[ -n "$ENUMS" ] || { echo "FAIL: no enums found in the proto"; exit 1; }
if compile "$TMP/gen" > "$TMP/added.log" 2>&1; then
  echo "FAIL: compiles with a value added to every enum"; exit 1
fi
status=0
for e in $ENUMS; do
  if grep -q "v1::$e gained a value" "$TMP/added.log"; then
    echo "ok: v1::$e gained a value -> does not compile"
  else
    echo "FAIL: a value added to $e compiles (no static_assert ties it)"; status=1
  fi
done
[ $status = 0 ] || grep "error" "$TMP/added.log" | head -20
exit $status
