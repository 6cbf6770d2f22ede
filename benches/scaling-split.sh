#!/usr/bin/env bash
# The checker on generated fixtures of 24 to 48 deliveries over 4 cards, checked whole with
# the independence split, one duplicate, one lost ack and one crash, reconciliation
# interleaved, DFS on 2 threads (the table of issue 13). Seed 1 is `arrival gen`'s default;
# seed 7 is the seed of the issue's first table (it puts about half the deliveries on one
# card). Each size runs with every reduction on (the defaults); sizes up to 28 also run
# with `merge_settled = false` (which turns `merge_paused` off too) and with
# `symmetry = false` as well, to show what the reductions remove.
# One process per run, a time cap per run. Prints a Markdown table.
# Usage: benches/scaling-split.sh [MAX_SECONDS_PER_RUN] [ENGINE] [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
engine=${2:-arrival}
seeds=${3:-"1 7"}
cargo build --release --quiet
bin=target/release/arrival
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| seed | deliveries | engine | symmetry | merge_settled | parts | states | unique | seconds | unique/s | peak RSS MiB | verdict |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for seed in $seeds; do
  for deliveries in 24 28 32 36 40 44 48; do
    fixture="$work/gen-$seed-$deliveries.json"
    "$bin" gen --cards 4 --deliveries "$deliveries" --seed "$seed" --out "$fixture"
    settings="true,true"
    if [ "$deliveries" -le 28 ]; then
      settings="true,true true,false false,false"
    fi
    for setting in $settings; do
      symmetry=${setting%,*}
      merge=${setting#*,}
      model="$work/m.toml"
      cat >"$model" <<TOML
fixture = "$fixture"
duplicates = 1
lost_acks = 1
crashes = 1
reconciliation = "interleaved"
strategy = "dfs"
threads = 2
split = true
symmetry = $symmetry
merge_settled = $merge
expect = "pass"
TOML
      if timeout "$limit" "$bin" check --quiet --json --engine "$engine" "$model" >"$work/out.json"; then
        python3 - "$seed" "$deliveries" "$engine" "$symmetry" "$merge" "$work/out.json" <<'PY'
import json, sys
seed, deliveries, engine, symmetry, merge, path = sys.argv[1:7]
m = json.load(open(path))["models"][0]
rate = m['unique_states'] / max(m['seconds'], 1e-9)
print(f"| {seed} | {deliveries} | {engine} | {symmetry} | {merge} | {m['parts']} | {m['states']:,} | "
      f"{m['unique_states']:,} | {m['seconds']:.2f} | {rate:,.0f} | {m['peak_rss_mib']:.0f} | {m['verdict']} |")
PY
      else
        echo "| $seed | $deliveries | $engine | $symmetry | $merge | - | - | - | > $limit | - | - | timed out |"
      fi
    done
  done
done
