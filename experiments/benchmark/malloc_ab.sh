#!/usr/bin/env bash
# glibc's allocator, default against told to keep freed memory (large blocks from the heap, never trimmed): beam-4
# decoding, each measurement a process of its own (decode_time.py), alternating, three rounds. Output: malloc_ab.txt.
#   bash experiments/benchmark/malloc_ab.sh "dwlstm float32 int8 4" "marian float32 int8 4"
cd "$(dirname "$0")/../.."
for round in 1 2 3; do
  for allocator in default tuned; do
    if [ $allocator = tuned ]; then export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184
    else unset MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_; fi
    for spec in "$@"; do
      echo "round $round $allocator $spec: $(PYTHONPATH=. python experiments/benchmark/decode_time.py $spec 2>/dev/null | tail -1) sent/s"
    done
  done
done
