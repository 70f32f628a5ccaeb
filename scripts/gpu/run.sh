#!/usr/bin/env bash
# On a lent GPU machine, from the repository root, with .devbundle and .gl carried (scripts/gpu/bundle.sh):
# unpacks Node, Dawn and the Vulkan loader, then runs `bench/main.ts <suite> ...` on the GPU through Vulkan.
# Usage: bash scripts/gpu/run.sh gpu [args]; results land in $OUT (or .devbundle/results). With --cli first: the
# webart CLI (bash scripts/gpu/run.sh --cli train).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
b=.devbundle
[ -x /tmp/node ] || { xz -dc $b/node.xz >/tmp/node && chmod +x /tmp/node; }
[ -f $b/node_modules/webgpu/dist/linux-x64/dawn.node ] ||
  xz -dc $b/node_modules/webgpu/dist/linux-x64/dawn.node.xz >$b/node_modules/webgpu/dist/linux-x64/dawn.node
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] || icd=$(ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1)
export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>/dev/null
if [ "${1:-}" = "--cli" ]; then
  # The webart CLI instead (bundle.sh's cli.mjs), in a scratch folder: bash scripts/gpu/run.sh --cli train ...
  shift
  t=$(mktemp -d) && mkdir -p "$t/node_modules" && ln -s "$PWD/$b/node_modules/webgpu" "$t/node_modules/webgpu"
  cli=$PWD/$b/cli.mjs
  (cd "$t" && /tmp/node "$cli" "$@")
  exit $?
fi
/tmp/node $b/bench.mjs "$@"
rc=$?
[ -n "${OUT:-}" ] && cp $b/results/*.json "$OUT/" 2>/dev/null
exit $rc
