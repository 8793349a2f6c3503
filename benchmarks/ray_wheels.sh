#!/usr/bin/env bash
# Ray for the offline GPU machine (python 3.12, x86_64), as ../shared/vllm brings vLLM: download the three wheels
# Ray adds to that machine (ray, click, msgpack; its other requirements - filelock, jsonschema, packaging, protobuf,
# pyyaml, requests - are there with torch and the vLLM set), cut them into git-ignored folders .rw1 .rw2 of at most
# 50 MiB (the 79 MB ray wheel travels in two parts); .rw1 holds this script and the checksums.
#   here:   bash benchmarks/ray_wheels.sh
#   there:  mkdir -p /tmp/rwstage && cp .rw1/* .rw2/* /tmp/rwstage/ && bash .rw1/ray_wheels.sh install
#           -> "ray 2.60.0 installed in /tmp/site"
set -euo pipefail
RAY_VERSION=${RAY_VERSION:-2.60.0}
if [ "${1:-}" = "install" ]; then
  cd /tmp/rwstage
  for first in *.part-aa; do [ -e "$first" ] || continue; cat "${first%.part-aa}".part-* > "${first%.part-aa}"; done
  rm -f ./*.part-*
  sha256sum -c --quiet SHA256SUMS
  PY=${PYTHON:-python3}
  [ "${CHECK_ONLY:-0}" = 1 ] && { echo "wheels whole: $(ls ./*.whl | tr '\n' ' ')"; exit 0; }
  "$PY" -m pip install -q --no-deps --no-index --target /tmp/site ./*.whl
  PYTHONPATH=/tmp/site "$PY" -c "import ray, ray.cluster_utils; print('ray', ray.__version__, 'installed in /tmp/site')"
  exit 0
fi
root=$(git rev-parse --show-toplevel); cd "$root"
cache=${P2P_RAY_WHEELS:-$HOME/.cache/p2p-ray-wheels}; mkdir -p "$cache"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$cache" \
  "ray==$RAY_VERSION" click msgpack
exclude=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$exclude")"
grep -qx '/.rw\*/' "$exclude" 2>/dev/null || echo '/.rw*/' >> "$exclude"
rm -rf .rw1 .rw2; mkdir -p .rw1 .rw2
(cd "$cache" && sha256sum ./*.whl | sed 's# \./# #') > .rw1/SHA256SUMS
for f in "$cache"/*.whl; do
  case "$(basename "$f")" in
    ray-*) split -b 45M "$f" "$root/.rw1/$(basename "$f").part-"; mv .rw1/"$(basename "$f")".part-ab* .rw2/ ;;
    *) cp "$f" .rw2/ ;;
  esac
done
cp "$0" .rw1/ray_wheels.sh
du -sh .rw1 .rw2
