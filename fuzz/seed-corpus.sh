#!/bin/sh
# Fills fuzz/corpus/<target>/ (gitignored) with seeds: the repository's fixtures, malformed
# inputs and protocol inputs for `fixture`; every delivery's `event` object of those
# fixtures for `envelope`; every request of the facts fixtures, signed as the fixture
# signs it, in the `ingress` target's input format; plus the hand-picked files in
# fuzz/seeds/<target>/.
# Idempotent: existing corpus files (what earlier runs found) are kept.
set -eu
cd "$(dirname "$0")"
mkdir -p corpus/envelope corpus/fixture corpus/ingress
for dir in fixtures fixtures/regressions tests/malformed tests/inputs; do
    for file in ../$dir/*.json; do
        [ -e "$file" ] || continue
        cp "$file" "corpus/fixture/seed-$(echo "$dir" | tr / -)-$(basename "$file")"
    done
done
cp seeds/fixture/* corpus/fixture/
cp seeds/envelope/* corpus/envelope/
cp seeds/ingress/* corpus/ingress/
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
python3 - <<'PY'
# The `ingress` target's input: clock, X-Acme-Source, X-Acme-Signature, webhook-id,
# webhook-timestamp, webhook-signature ("-" when not sent), choice bytes, then the body.
import base64, calendar, glob, hashlib, hmac, json, os, time
def unix(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
def secret_bytes(secret):
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_"):]), True
    return secret.encode(), False
for path in sorted(glob.glob("../fixtures/*.json") + glob.glob("../fixtures/regressions/*.json")):
    with open(path, encoding="utf-8") as f:
        fixture = json.load(f)
    if fixture.get("protocol") != "facts":
        continue
    keys = {k["id"]: (k["source"], k["secret"]) for k in fixture.get("keys", [])}
    for source, secrets in fixture.get("secrets", {}).items():
        for n, secret in enumerate(secrets):
            keys[f"{source}-{n + 1}"] = (source, secret)
    stem = os.path.splitext(os.path.basename(path))[0]
    for request in fixture.get("requests", []):
        headers = {name.lower(): value for name, value in request.get("headers", {}).items()}
        body = request["body"].encode()
        if "sign" in request:
            source, secret = keys[request["sign"]]
            raw, standard = secret_bytes(secret)
            if standard:
                message = f'{headers["webhook-id"]}.{headers["webhook-timestamp"]}.'.encode() + body
                tag = base64.b64encode(hmac.new(raw, message, hashlib.sha256).digest()).decode()
                headers["webhook-signature"] = f"v1,{tag}"
            else:
                headers.setdefault("x-acme-source", source)
                headers["x-acme-signature"] = hmac.new(raw, body, hashlib.sha256).hexdigest()
        names = ["x-acme-source", "x-acme-signature", "webhook-id", "webhook-timestamp", "webhook-signature"]
        number = request["request"]
        lines = [str(unix(request["received_at"]))] + [headers.get(name, "-") for name in names]
        choices = bytes([97 + number % 7, 97 + number % 3, 0, 97 + number % 20])
        out = f"corpus/ingress/seed-{stem}-{number}"
        with open(out, "wb") as f:
            f.write("\n".join(lines).encode() + b"\n" + choices + b"\n" + body)
PY
echo "corpus/envelope: $(ls corpus/envelope | wc -l) files, corpus/fixture: $(ls corpus/fixture | wc -l) files, corpus/ingress: $(ls corpus/ingress | wc -l) files"
