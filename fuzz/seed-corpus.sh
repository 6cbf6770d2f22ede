#!/bin/sh
# Fills fuzz/corpus/<target>/ (gitignored) with seeds: the repository's fixtures, malformed
# inputs and protocol inputs for `fixture`; every delivery's `event` object of those
# fixtures for `envelope`; plus the hand-picked files in fuzz/seeds/<target>/.
# Idempotent: existing corpus files (what earlier runs found) are kept.
set -eu
cd "$(dirname "$0")"
mkdir -p corpus/envelope corpus/fixture
for dir in fixtures fixtures/regressions tests/malformed tests/inputs; do
    for file in ../$dir/*.json; do
        [ -e "$file" ] || continue
        cp "$file" "corpus/fixture/seed-$(echo "$dir" | tr / -)-$(basename "$file")"
    done
done
cp seeds/fixture/* corpus/fixture/
cp seeds/envelope/* corpus/envelope/
python3 - <<'PY'
import glob, json, os
for path in sorted(glob.glob("../fixtures/*.json") + glob.glob("../fixtures/regressions/*.json")
                   + glob.glob("../tests/inputs/*.json")):
    with open(path, encoding="utf-8") as f:
        fixture = json.load(f)
    stem = os.path.splitext(os.path.basename(path))[0]
    for delivery in fixture.get("deliveries", []):
        out = f"corpus/envelope/seed-{stem}-{delivery['delivery']}.json"
        with open(out, "w", encoding="utf-8") as f:
            json.dump(delivery["event"], f, separators=(",", ":"))
PY
echo "corpus/envelope: $(ls corpus/envelope | wc -l) files, corpus/fixture: $(ls corpus/fixture | wc -l) files"
