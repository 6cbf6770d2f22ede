#!/usr/bin/env bash
# Scaling table of the model checker: generated fixtures of growing size, checked whole and
# split into independent parts, with and without faults. One process per run, so peak RSS is
# that run's. Prints a Markdown table. Usage: benches/scaling.sh [MAX_SECONDS_PER_RUN]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-300}
cargo build --release --quiet
bin=target/release/arrival
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| deliveries | cards | D L C | split | parts | states | unique | seconds | states/s | peak RSS MiB | verdict |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for cards in 2 4; do
  for deliveries in 6 8 10 12 14 16; do
    fixture="$work/gen-$cards-$deliveries.json"
    "$bin" gen --cards "$cards" --deliveries "$deliveries" --dup-rate 0.1 --conflict-rate 0.1 --seed 7 --out "$fixture"
    for faults in "0 0 0" "1 1 1"; do
      read -r d l c <<<"$faults"
      for split in false true; do
        model="$work/m.toml"
        cat >"$model" <<TOML
fixture = "$fixture"
duplicates = $d
lost_acks = $l
crashes = $c
strategy = "dfs"
threads = 2
split = $split
expect = "pass"
TOML
        if timeout "$limit" "$bin" check --quiet --json "$model" >"$work/out.json"; then
          python3 - "$deliveries" "$cards" "$faults" "$split" "$work/out.json" <<'PY'
import json, sys
deliveries, cards, faults, split, path = sys.argv[1:6]
m = json.load(open(path))["models"][0]
print(f"| {deliveries} | {cards} | {faults} | {split} | {m['parts']} | {m['states']:,} | {m['unique_states']:,} | "
      f"{m['seconds']:.2f} | {m['states_per_second']:,.0f} | {m['peak_rss_mib']:.0f} | {m['verdict']} |")
PY
        else
          echo "| $deliveries | $cards | $faults | $split | - | - | - | > $limit | - | - | timed out |"
        fi
      done
    done
  done
done
