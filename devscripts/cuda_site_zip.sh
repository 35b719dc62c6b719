#!/usr/bin/env bash
# Build .whl/site.zip: the Python packages a bare CUDA machine lacks for devscripts/cuda_all.sh, small enough to
# travel with the working tree (the device tool sends at most 64 MiB; the repo is ~52 MB without the SmolLM2 draft).
#
#   bash devscripts/cuda_site_zip.sh        # then carry .whl/site.zip (cuda_all.sh extracts it to /tmp/site)
#
# What it holds (for the 2026-12 H200 image: Python 3.12, torch 2.11+cu130, transformers 5.17, no bitsandbytes):
# transformers 5.25 with only the model folders specdesk and transformers' own imports need, bitsandbytes with
# only its CUDA 13 and CPU libraries, huggingface_hub 2.4 and the HTTP client it needs (httpx2, ...), gguf,
# platformdirs. The image has no `kernels` package: cuda_all.sh sets USE_HUB_KERNELS=0 when it uses the zip.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
work=$(mktemp -d)
pip_dl() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$work/wheels" "$@"
}
pip_dl transformers==5.25.0 bitsandbytes==0.50.2 gguf==0.19.0 platformdirs huggingface_hub==2.4.0 \
    httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 regex==2026.5.9 click==8.5.1 anyio==4.16.0 idna==3.20 \
    h11==0.16.0 filelock==4.3.2 fsspec==2026.9.0 tqdm==4.70.1
mkdir -p "$work/site"
for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/site"; done
keep=" auto llama encoder_decoder timm_wrapper roformer speecht5 qwen3_asr minicpm5_moe llama4 gpt_oss bert t5 qwen3_5 qwen2 gpt2 gemma "
for d in "$work"/site/transformers/models/*/; do
    name=$(basename "$d")
    case "$keep" in *" $name "*) ;; *) rm -rf "$d";; esac
done
find "$work/site/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*cuda130*' ! -name '*cpu*' -delete
rm -f .whl/site.zip
(cd "$work/site" && python3 -m zipfile -c "$OLDPWD/.whl/site.zip" .)
rm -rf "$work"
ls -l .whl/site.zip
