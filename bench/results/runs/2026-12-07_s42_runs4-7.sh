#!/usr/bin/env bash
# Session 42, runs 4-7: device calls typed by hand on the machine run 3 left warm (one H100), over
# run 3's gpubin (binaries staged at 844ce64, the code of main 5b3307d), as they ran. Run 5's first
# try failed at once (gpubin/bin was not unpacked: `fp4moe-bench: No such file`); the line below is
# the second try.
# run 4: DeepSeek-R1 and Mixtral against Marlin and Humming at the decode points
source scripts/gpu-lib.sh && gpu_init && gpu_humming_env && gpu_peer_presets dsr1 1,8,128 200 --humming deepseek-r1; gpu_peer_presets mixtral 1,8,128 120 --humming mixtral-8x7b; gpu_pack all; cat $OUT/run.txt
# run 5: Mixtral's configs at T = 8 / 16 (run 4 had Marlin and Humming ahead at T=8)
tar -C gpubin -xzf gpubin/bin.tar.gz; mkdir -p $OUT && timeout 200 gpubin/bin/fp4moe-bench --preset mixtral-8x7b --routing random --tokens 8,16 --tune $OUT/tune_mixtral.txt > $OUT/tune_mixtral_log.txt 2>&1
# run 6: Llama-4-Scout and Qwen3-235B against Marlin and Humming
source scripts/gpu-lib.sh && gpu_init && gpu_humming_env && gpu_peer_presets scout 1,8,128 100 --humming llama4-scout; gpu_peer_presets qwen235 1,8 100 --humming qwen3-235b-a22b; gpu_pack all; cat $OUT/run.txt
# run 7: Scout's configs at T=8, then the default with and without GEMM2's range split
tar -C gpubin -xzf gpubin/bin.tar.gz 2>/dev/null; mkdir -p $OUT; for p in llama4-scout; do timeout 60 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --tune $OUT/tune_$p.txt > $OUT/tune_${p}_log.txt 2>&1; grep -A2 "tuning" $OUT/tune_${p}_log.txt; timeout 40 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --verbose --no-range-split 2>&1 | tail -4; timeout 40 gpubin/bin/fp4moe-bench --preset $p --routing random --tokens 8 --verbose 2>&1 | tail -4; done
