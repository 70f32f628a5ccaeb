#!/usr/bin/env bash
# Prepares .devbundle/ for a run on a lent GPU machine (which has no Node and no network): the bench and the CLI
# bundled by esbuild (the built packages: WGSL and the embedded model inlined), this machine's node binary (xz), Dawn for Linux x64, and the
# Vulkan loader (.gl/, Debian's libvulkan1). scripts/gpu/run.sh unpacks and runs it there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.devbundle
mkdir -p "$out/node_modules/webgpu/dist/linux-x64" .gl
grep -qx '/.devbundle/' .git/info/exclude 2>/dev/null || echo /.devbundle/ >>.git/info/exclude
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
node scripts/build.mjs >/dev/null
npx esbuild bench/main.ts --bundle --platform=node --format=esm --target=node20 \
  --loader:.wgsl=text --outfile="$out/bench.mjs" \
  --external:webgpu --external:@tensorflow/* --external:tsx \
  --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --log-level=warning
# The CLI too, for `webart train` on the GPU (session.sh).
npx esbuild packages/webart/dist/cli.js --bundle --platform=node --format=esm --target=node20 \
  --loader:.wgsl=text --outfile="$out/cli.mjs" --external:webgpu --external:playwright --external:vite \
  --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --log-level=warning
cp node_modules/webgpu/index.js node_modules/webgpu/package.json "$out/node_modules/webgpu/"
[ -f "$out/node_modules/webgpu/dist/linux-x64/dawn.node.xz" ] ||
  xz -T2 -6 -c node_modules/webgpu/dist/linux-x64/dawn.node >"$out/node_modules/webgpu/dist/linux-x64/dawn.node.xz"
[ -f "$out/node.xz" ] || xz -T2 -6 -c "$(readlink -f "$(command -v node)")" >"$out/node.xz"
if ! ls .gl/libglvnd0_*.deb >/dev/null 2>&1; then
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  apt-get $o update >/dev/null && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -sh "$out" .gl
