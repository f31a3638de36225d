#!/usr/bin/env bash
# The package test: install nanodist into a fresh prefix, build examples/standalone against
# that prefix alone (find_package(nanodist)), run it under mpiexec with 3 ranks and check
# what it prints; then show that a consumer missing one of the package's dependencies gets
# a clear configure error naming it, not a broken build.
#   tests/install_and_consume.sh BUILD_DIR SOURCE_DIR MPIEXEC [CXX_FLAGS [HEADERS]]
# CXX_FLAGS: the build's own (a sanitizer build's consumer must link the sanitizers too).
# HEADERS: "check" (default) compiles every installed header alone; "skip" leaves that to the
# release build, where the same headers compile with the same flags (pkg-config's alone).
set -euo pipefail
build=$1 source=$2 mpiexec=$3 cxx_flags=${4:-} headers=${5:-check}
case $headers in check | skip) ;; *) echo "install_and_consume.sh: HEADERS is check or skip, not '$headers'" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/nanodist/comm/communicator.hpp"  # headers under nanodist/
test -f "$work/prefix/lib/cmake/nanodist/nanodistConfig.cmake"
programs=$(dirname "$(find "$work/prefix" -path '*/nanodist/bin/train_dp' -print -quit)")
for program in train_dp train_pp train_tp train_3d prepare_data nanodist nanodist-run allreduce timeout comm_bench gpt_bench; do
  test -x "$programs/$program" || { echo "$program is not installed in $programs" >&2; exit 1; }
done
"$programs/train_dp" --help | grep -q -- "--zero"  # an installed program runs
# The installed launcher finds the trainer beside it by its short name, and passes its answer on.
status=0
"$programs/nanodist-run" -n 1 --oversubscribe train_dp --max-iters -3 > "$work/launcher.log" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q -- "--max-iters must be" "$work/launcher.log" ||
  { echo "the installed nanodist-run did not run the installed train_dp (status $status):" >&2; cat "$work/launcher.log" >&2; exit 1; }
test -f "$(find "$work/prefix/share/doc" -name trainers.md -print -quit)"

cmake -S "$source/examples/standalone" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_FLAGS="$cxx_flags" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
out=$("$mpiexec" --oversubscribe -n 3 "$work/build/hello_nanodist" --backend ring)
echo "$out"
grep -q "allreduce on 3 ranks with backend ring: sum = 6 (expected 6)" <<< "$out"
grep -q 'dy/dx = \[2, 4, 6\]' <<< "$out"

# Without CMake: the same program through pkg-config, on 2 ranks.
export PKG_CONFIG_PATH="$(dirname "$(find "$work/prefix" -name nanodist.pc -print -quit)")"
# The version the package says is the one CHANGELOG.md records last, and a program asking for
# an older minor version is refused (the installed API changed since).
changelog_version=$(grep -m1 -oP '^## \K[0-9]+\.[0-9]+' "$source/CHANGELOG.md")
test "$(pkg-config --modversion nanodist)" = "$changelog_version" ||
  { echo "pkg-config says $(pkg-config --modversion nanodist), CHANGELOG.md's first heading $changelog_version" >&2; exit 1; }
mkdir -p "$work/old_consumer"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(old LANGUAGES CXX)\nfind_package(nanodist 0.1 CONFIG REQUIRED)\n' \
  > "$work/old_consumer/CMakeLists.txt"
if cmake -S "$work/old_consumer" -B "$work/old_consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
     > "$work/old_consumer.log" 2>&1; then
  echo "a consumer asking for nanodist 0.1 configured against $changelog_version" >&2
  exit 1
fi
grep -q "compatible with requested version \"0.1\"" "$work/old_consumer.log" || { cat "$work/old_consumer.log" >&2; exit 1; }
echo "package version $changelog_version, as CHANGELOG.md says; a consumer asking for 0.1 is refused"
# shellcheck disable=SC2046,SC2086  # the flags are words
c++ $cxx_flags $(pkg-config --cflags nanodist) "$source/examples/standalone/hello_nanodist.cpp" \
  $(pkg-config --libs nanodist) -o "$work/hello_pkg_config"
out=$("$mpiexec" --oversubscribe -n 2 "$work/hello_pkg_config" --backend naive)
echo "$out"
grep -q "allreduce on 2 ranks with backend naive: sum = 3 (expected 3)" <<< "$out"

# Every installed header compiles on its own (it includes what it uses).
if [ "$headers" = check ]; then
  cd "$work/prefix/include/nanodist"
  # shellcheck disable=SC2016  # expanded by the inner shell
  find comm nn parallel -name '*.hpp' | sort | xargs -P 2 -I{} sh -c \
    'printf "#include \"%s\"\n" "$1" | c++ -x c++ -fsyntax-only $2 - || { echo "$1 does not compile alone" >&2; exit 255; }' \
    sh {} "$(pkg-config --cflags nanodist)"
  echo "$(find comm nn parallel -name '*.hpp' | wc -l) installed headers, each compiles alone"
  cd - > /dev/null
else
  # The compile is the same in both builds while no header tests the build's own defines
  # (pkg-config adds -DNANODIST_HAVE_CUDA/NCCL where the release build has them).
  if grep -rl "NANODIST_HAVE_" "$work/prefix/include/nanodist" >&2; then
    echo "these headers depend on the build's defines: check them in this build too" >&2
    exit 1
  fi
  echo "installed headers: each compiles alone, checked by the release build's run of this test"
fi

# A dependency the package needs, made unfindable (CMAKE_IGNORE_PATH hides Eigen's CMake
# files, as on a machine without libeigen3-dev): configure stops and names it.
eigen_dir=$(dirname "$(find /usr/share /usr/lib -name Eigen3Config.cmake -print -quit)")
if cmake -S "$source/examples/standalone" -B "$work/missing" -DCMAKE_PREFIX_PATH="$work/prefix" \
     -DCMAKE_IGNORE_PATH="$eigen_dir" > "$work/missing.log" 2>&1; then
  echo "configure succeeded without Eigen3" >&2
  exit 1
fi
if ! grep -q 'Could not find a package configuration file provided by "Eigen3"' "$work/missing.log"; then
  cat "$work/missing.log" >&2
  exit 1
fi
echo "without Eigen3, configure stops: $(grep -m1 -o 'Could not find a package configuration file provided by "Eigen3"' "$work/missing.log")"
