#!/usr/bin/env bash
# Two builds of one criterion bench, interleaved in pairs: on a machine whose speed drifts,
# A then B in each pair compares the builds, not the host's moods. Prints each pair's
# criterion point estimates (ns per iteration), each build's median, and the median of the
# pairs' ratios B/A.
# Usage: benches/ab-criterion.sh BENCH_A BENCH_B FILTER [PAIRS] [SECONDS]
#   BENCH_A/B: bench executables, e.g. from `cargo bench --bench reducer --no-run` in two
#   worktrees (the path cargo prints); FILTER: a criterion filter such as '^reducer/decide$'.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
a=$1
b=$2
filter=$3
pairs=${4:-5}
seconds=${5:-5}
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "benches/ab-criterion.sh: $bin is not an executable" >&2; exit 2; }
done
# The point estimate of criterion's `time: [low mid high]` line, in nanoseconds.
estimate() {
  "$1" --bench "$filter" --warm-up-time 1 --measurement-time "$seconds" --noplot 2>/dev/null |
    awk '/time:/ && !done {
      gsub(/\[|\]/, "");
      for (i = 1; i <= NF; i++) if ($i == "time:") { v = $(i + 3); u = $(i + 4) }
      f = (u == "ps") ? 0.001 : (u == "ns") ? 1 : (u == "µs" || u == "us") ? 1000 : (u == "ms") ? 1e6 : 1e9;
      done = 1 }
      END { printf "%.3f\n", v * f }'
  # (awk reads to the end: a bench whose stdout closes early panics on the broken pipe.)
}
ta=()
tb=()
ratios=()
for pair in $(seq "$pairs"); do
  x=$(estimate "$a")
  y=$(estimate "$b")
  ta+=("$x")
  tb+=("$y")
  ratios+=("$(awk -v x="$x" -v y="$y" 'BEGIN {printf "%.4f", y / x}')")
  echo "pair $pair: A $x ns, B $y ns, B/A ${ratios[-1]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
echo "A ($a): median $(median "${ta[@]}") ns"
echo "B ($b): median $(median "${tb[@]}") ns"
echo "B/A: median of the pairs' ratios $(median "${ratios[@]}")"
