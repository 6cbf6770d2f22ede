#!/usr/bin/env bash
# Two builds of `arrival` on one model, interleaved: on a machine whose speed drifts (a
# shared host), timing one build and then the other compares the host's moods, not the
# builds. Runs ROUNDS rounds; in each, RUNS `arrival check MODEL --quiet` processes of build A
# and then of build B, and prints each build's milliseconds per run, round by round, and the
# median. Whole processes: startup and model loading are in the figure for both builds.
# Usage: benches/ab.sh BIN_A BIN_B [MODEL] [ROUNDS] [RUNS]
#   e.g. git worktree add /tmp/old OLD_COMMIT && (cd /tmp/old && cargo build --release)
#        benches/ab.sh /tmp/old/target/release/arrival target/release/arrival
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
a=$1
b=$2
model=${3:-models/b62-15.toml}
rounds=${4:-8}
runs=${5:-10}
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "benches/ab.sh: $bin is not an executable" >&2; exit 2; }
done
"$a" check "$model" --quiet >/dev/null || [ $? -eq 1 ] || { echo "benches/ab.sh: $a cannot check $model" >&2; exit 2; }
declare -A times
for _ in $(seq "$rounds"); do
  for name in A B; do
    bin=$a
    [ "$name" = B ] && bin=$b
    start=$(date +%s%N)
    for _ in $(seq "$runs"); do
      "$bin" check "$model" --quiet >/dev/null || true
    done
    end=$(date +%s%N)
    times[$name]+="$(((end - start) / runs / 1000000)) "
  done
done
for name in A B; do
  bin=$a
  [ "$name" = B ] && bin=$b
  median=$(echo "${times[$name]}" | tr ' ' '\n' | sed '/^$/d' | sort -n |
    awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}')
  echo "$name ($bin): ms per run by round: ${times[$name]}; median $median"
done
