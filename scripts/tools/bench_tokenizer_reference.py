#!/usr/bin/env python3
"""Encode throughput of the Hugging Face `tokenizers` library, for comparison with
tests/bench/tokenizer_bench.cc on the same corpus; prints the same JSON fields.

  python scripts/tools/bench_tokenizer_reference.py CORPUS TOKENIZER_JSON [THREADS] [REPEAT]

CORPUS: the fixture corpus.jsonl (its "text" fields) or plain text, one string per line.
"single": a loop of Tokenizer.encode (one thread, as the library encodes a single string);
"multi": Tokenizer.encode_batch over the whole corpus, on THREADS rayon threads
(RAYON_NUM_THREADS, default all cores).
"""
import json
import os
import sys
import time


def read_corpus(path):
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            texts.append(json.loads(line)["text"] if line.startswith("{") else line)
    return texts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    corpus, tok_path = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count()
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # read when the thread pool starts
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from tokenizers import Tokenizer

    t0 = time.perf_counter()
    tok = Tokenizer.from_file(tok_path)
    load_s = time.perf_counter() - t0
    texts = read_corpus(corpus)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for t in texts:  # warm-up: fills the BPE cache
        tok.encode(t)

    out = {"impl": "hf_tokenizers", "tokenizer": tok_path, "texts": len(texts), "bytes": nbytes,
           "repeat": repeat, "load_seconds": load_s}
    start = time.perf_counter()
    tokens = 0
    for _ in range(repeat):
        for t in texts:
            tokens += len(tok.encode(t).ids)
    s = time.perf_counter() - start
    out["single"] = {"threads": 1, "seconds": s, "mb_s": nbytes * repeat / 1e6 / s,
                     "tokens_s": tokens / s}
    start = time.perf_counter()
    tokens = 0
    for _ in range(repeat):
        tokens += sum(len(e.ids) for e in tok.encode_batch(texts))
    s = time.perf_counter() - start
    out["multi"] = {"threads": threads, "seconds": s, "mb_s": nbytes * repeat / 1e6 / s,
                    "tokens_s": tokens / s}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
