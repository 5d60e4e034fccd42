#!/usr/bin/env bash
# Benchmark: the warm rebuild of an engine image after editing one patch.
#
#   tools/patches/rebuild_bench.sh [RUNS] [PROFILE_DIR] [header|code]
#
# Each run makes a new edit, so no cache holds its result, rehashes v3
# (`bazel run //patches:rehash -- v3 --write`, not timed), then times
# `./tools/bazel build --config=ci //recipes:glm53_v3` and prints Bazel's elapsed time, the
# process count and the load average. The edit:
#   header  the first (description) line of patches/v3/shm-off-loop.diff: the patch's sha256
#           and the declaration change, the patched files do not
#   code    a comment line the patch adds to the new file of patches/v3/event-loop-stall-dump.diff:
#           one patched file changes too
# With PROFILE_DIR each timed build also writes PROFILE_DIR/run<N>.json (--profile; read it with
# `bazel analyze-profile`). The patch and series.json are restored on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-5}
profile_dir=${2:-}
mode=${3:-header}
case $mode in
  header) patch=patches/v3/shm-off-loop.diff ;;
  code) patch=patches/v3/event-loop-stall-dump.diff ;;
  *) echo "rebuild_bench.sh: the edit is header or code, not $mode" >&2; exit 2 ;;
esac
declaration=patches/v3/series.json
if ! git diff --quiet -- "$patch" "$declaration"; then
  echo "rebuild_bench.sh: $patch or $declaration has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
saved=$(mktemp -d)
cp "$patch" "$saved/patch"
cp "$declaration" "$saved/declaration"
log=$(mktemp)
restore() {
  cp "$saved/patch" "$patch"
  cp "$saved/declaration" "$declaration"
  rm -rf "$saved" "$log"
}
trap restore EXIT

target=//recipes:glm53_v3
./tools/bazel build --config=ci "$target" >/dev/null 2>&1   # warm: the unedited image is built

for i in $(seq 1 "$runs"); do
  stamp="bench $(date +%s%N)-$i"
  if [[ $mode == header ]]; then
    # The description line: nothing the patch applies changes.
    sed "1s/\$/ ($stamp)/" "$saved/patch" >"$patch"
  else
    # The first comment line the patch adds to http_server.py: its patched bytes change, its line
    # count not.
    awk -v stamp="$stamp" '/^\+\+\+ b\/python\/sglang\/srt\/entrypoints\/http_server.py$/ {f = 1}
      f && !done && /^\+[[:space:]]*# / {$0 = $0 " (" stamp ")"; done = 1} {print}' "$saved/patch" >"$patch"
  fi
  cmp -s "$patch" "$saved/patch" && { echo "rebuild_bench.sh: the $mode edit changed nothing in $patch" >&2; exit 1; }
  ./tools/bazel run --config=ci //patches:rehash -- v3 --write >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  profile=()
  [[ -n $profile_dir ]] && profile=("--profile=$profile_dir/run$i.json")
  ./tools/bazel build --config=ci "${profile[@]}" "$target" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  elapsed=$(grep -o 'Elapsed time: [0-9.]*s' "$log" | tail -n1 | cut -d' ' -f3)
  processes=$(grep -o '[0-9]* processes[^.]*' "$log" | tail -n1)
  printf 'run %d (%s): elapsed %s, %s, load average %s\n' "$i" "$mode" "$elapsed" "$processes" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
