#!/usr/bin/env bash
# What decoding needs on a lent GPU machine that has Python 3.12 and torch with CUDA but no fairseq and no network,
# packed into gpu_carry/ (ignored by git, so it travels only when a call carries it) so that it fits the 64 MiB a call may carry:
#   gpu_carry/site    fairseq-fixed 0.12.3.1 and its pure-Python needs, unpacked from cp312 wheels (fairseq's examples,
#                     the alignment/BASE-layer/LevT C++ extensions and sacremoses left out: decoding InsNet and the AR
#                     model needs none of them; LevT's libnat does, so LevT does not decode there)
#   gpu_carry/data    the Multi30k test split and dictionaries (data-bin/multi30k_en_de); DATA="data-bin/A ..." adds each
#                     whole data-bin folder as gpu_carry/data/A (training there: recipes/gpu_lm_pair.sh)
#   gpu_carry/models  NAME.pt for each NAME=CHECKPOINT: float16 parameters, no optimizer state
#                     (recipes/average_checkpoints.py --transfer; they load into float32 parameters)
#
#   bash recipes/gpu_pack.sh student=checkpoints/t120_kd120_curriculum_query_kd/checkpoint_avg.pt \
#       ar=checkpoints/t120_ar/checkpoint_avg.pt channel=checkpoints/t60_ar_rev/checkpoint_avg.pt
# then, on the GPU machine (the device tool's run, carry gpu_carry):
#   PYTHONPATH=$PWD/gpu_carry/site python3 benchmarks/decode_latency.py --device cuda --data gpu_carry/data \
#       --insnet gpu_carry/models/student.pt ...        # results/gpu_latency_s28.txt has the whole command
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || [ -n "${DATA:-}" ] || { echo "usage: [DATA='data-bin/A ...'] bash recipes/gpu_pack.sh NAME=CHECKPOINT..." >&2; exit 2; }
py=${PYTHON:-.venv/bin/python}
out=gpu_carry
rm -rf $out && mkdir -p $out/site $out/data $out/models .whl
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
$py -m pip download -q --no-deps "${plat[@]}" -d .whl fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 \
  bitarray==3.12.3
$py -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # sdist only on PyPI: built here (pure Python)
for w in .whl/fairseq_fixed-0.12.3.1-cp312-*.whl .whl/hydra_core-1.3.2-*.whl .whl/omegaconf-2.3.0-*.whl \
         .whl/bitarray-3.12.3-cp312-*.whl .whl/antlr4_python3_runtime-4.9.3-*.whl; do
  $py -m zipfile -e "$w" $out/site
done
rm -rf $out/site/fairseq/examples $out/site/alignment_train_cpu_binding*.so $out/site/fairseq/libbase*.so \
  $out/site/fairseq/libnat*.so
cp data-bin/multi30k_en_de/dict.* data-bin/multi30k_en_de/test.* $out/data/
for d in ${DATA:-}; do
  [ -f "$d/preprocess.log" ] || [ -f "$d/dict.txt" ] || ls "$d"/dict.*.txt >/dev/null 2>&1 \
    || { echo "gpu_pack.sh: DATA: $d is not a fairseq data-bin folder" >&2; exit 2; }
  cp -r "$d" $out/data/
done
for pair in "$@"; do
  name=${pair%%=*} ckpt=${pair#*=}
  [ "$name" != "$pair" ] && [ -f "$ckpt" ] || { echo "gpu_pack.sh: $pair: expected NAME=CHECKPOINT (a file)" >&2; exit 2; }
  $py recipes/average_checkpoints.py --inputs "$ckpt" --output $out/models/$name.pt --transfer
done
size=$(( $(du -sb $out | cut -f1) + $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) ))
echo "gpu_carry: $((size / 1048576)) MiB with the tracked tree (a call carries at most 64 MiB)"
[ $size -le $((64 * 1048576)) ] || { echo "gpu_pack.sh: over 64 MiB: pack fewer checkpoints" >&2; exit 1; }
