#!/usr/bin/env bash
# The self-contained layout holds every blob and skopeo reads it with the built digest.
set -euo pipefail
layout=$1
want=$(cat "$2")
for blob in $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/blobs/sha256/"+json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"][7:])); print(" ".join(l["digest"][7:] for l in m["layers"]))' "$layout"); do
  [[ -f "$layout/blobs/sha256/$blob" ]] || { echo "FAIL: blob $blob missing"; exit 1; }
done
if command -v skopeo >/dev/null; then
  got=$(skopeo inspect --format '{{.Digest}}' "oci:$layout:example_image")
  [[ "$got" == "$want" ]] || { echo "FAIL: skopeo sees $got, built $want"; exit 1; }
fi
echo "PASS: $layout is self-contained, digest $want"
