#!/usr/bin/env bash
# Tokenizer encode throughput, deltatune vs the Hugging Face `tokenizers` library, in one run on the
# same corpus (the tokenizer fixture corpus, 2,374 strings) for the Qwen3 and Qwen3.5 tokenizers.
# Needs a build (scripts/build.sh) and a Python with `tokenizers` (PYTHON, default python3).
#   scripts/tools/bench_tokenizer.sh [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-python3}
REPEAT=${1:-20}
THREADS=$(nproc)
F=$BUILD_DIR/fixtures/tokenizer
printf '%-8s %-14s %12s %12s %14s %14s\n' tokenizer impl "1T MB/s" "${THREADS}T MB/s" "1T tokens/s" "${THREADS}T tokens/s"
for t in qwen3 qwen3_5; do
  for impl in deltatune hf; do
    if [[ $impl == deltatune ]]; then
      out=$("$BUILD_DIR/tests/tokenizer_bench" "$F/corpus.jsonl" "$F/$t/tokenizer.json" "$THREADS" "$REPEAT")
    else
      out=$("$PYTHON" scripts/tools/bench_tokenizer_reference.py "$F/corpus.jsonl" "$F/$t/tokenizer.json" "$THREADS" "$REPEAT")
    fi
    "$PYTHON" -c 'import json,sys
r=json.loads(sys.argv[1]); s,m=r["single"],r["multi"]
print("%-8s %-14s %12.2f %12.2f %14.0f %14.0f"%(sys.argv[2],r["impl"],s["mb_s"],m["mb_s"],s["tokens_s"],m["tokens_s"]))' "$out" "$t"
  done
done
