#!/usr/bin/env bash
# Session 46, run 1 (prepared; the device tool started no machine in session 46's first seven tries):
# the prepared validation of sessions 45-46's changes (`2026-12-07_s45_prepared_validate.sh`, ~150 s:
# test_moe_gpu, fp4moe-bench --check with the column bound at six presets and w4a4, the JSON's null
# fields), then on an H200 the small-T table rows with the median set's floor and DeepSeek-R1 prefill
# (`2026-12-07_s45_run4.sh`), on an H100 the paired peers of the two presets never paired there
# (Maverick, gpt-oss-20b). Each part under its own folder of $OUT; the logs concatenated in
# $OUT/run.txt. Staging (22 MB):
#   FP4MOE_STAGE_BIN_ONLY="fp4moe-bench test_moe_gpu test_parallel_gpu" FP4MOE_STAGE_PYTHON=0 \
#   FP4MOE_STAGE_MARLIN=1 FP4MOE_STAGE_HUMMING=1 FP4MOE_STAGE_TRITON=1 scripts/stage-gpu.sh
# FP4MOE_S46_VALIDATE_ONLY=1 stops after the validation. Device command:
#   bash bench/results/runs/2026-12-07_s46_run1.sh; cat $OUT/run.txt   (carry ["gpubin"], ~450 s)
O=${OUT:?OUT must name the output folder}
mkdir -p "$O/validate" "$O/more"
OUT=$O/validate bash bench/results/runs/2026-12-07_s45_prepared_validate.sh
if [ "${FP4MOE_S46_VALIDATE_ONLY:-0}" != 1 ]; then
  if nvidia-smi -L | grep -q H200; then
    OUT=$O/more timeout 300 bash bench/results/runs/2026-12-07_s45_run4.sh
  else
    FP4MOE_SKIP_TESTS=1 FP4MOE_PAIRED_SPECS="maverick:llama4-maverick:--humming;gptoss20:gpt-oss-20b:--humming --triton" \
      OUT=$O/more timeout 260 bash bench/results/runs/2026-12-07_s45_run2.sh
  fi
fi
cat "$O"/validate/run.txt "$O"/more/run.txt > "$O/run.txt" 2>/dev/null
