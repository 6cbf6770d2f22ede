#!/usr/bin/env bash
# The checker on generated fixtures of 24 to 48 deliveries over 4 cards, checked whole with
# the independence split, one duplicate, one lost ack and one crash, reconciliation
# interleaved, DFS on 2 threads (the table of issue 13). One process per run, a time cap per
# run. Prints a Markdown table. Usage: benches/scaling-split.sh [MAX_SECONDS_PER_RUN] [ENGINE]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
engine=${2:-arrival}
cargo build --release --quiet
bin=target/release/arrival
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| deliveries | engine | symmetry | parts | states | unique | seconds | unique/s | peak RSS MiB | verdict |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for deliveries in 24 28 32 36 40 44 48; do
  fixture="$work/gen-$deliveries.json"
  "$bin" gen --cards 4 --deliveries "$deliveries" --seed 7 --out "$fixture"
  for symmetry in true false; do
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
expect = "pass"
TOML
    if timeout "$limit" "$bin" check --quiet --json --engine "$engine" "$model" >"$work/out.json"; then
      python3 - "$deliveries" "$engine" "$symmetry" "$work/out.json" <<'PY'
import json, sys
deliveries, engine, symmetry, path = sys.argv[1:5]
m = json.load(open(path))["models"][0]
rate = m['unique_states'] / max(m['seconds'], 1e-9)
print(f"| {deliveries} | {engine} | {symmetry} | {m['parts']} | {m['states']:,} | {m['unique_states']:,} | "
      f"{m['seconds']:.2f} | {rate:,.0f} | {m['peak_rss_mib']:.0f} | {m['verdict']} |")
PY
    else
      echo "| $deliveries | $engine | $symmetry | - | - | - | > $limit | - | - | timed out |"
    fi
  done
done
