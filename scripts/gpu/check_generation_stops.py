#!/usr/bin/env python3
"""A chat export generates with Hugging Face's own code and stops where a turn ends.

Loads the export with AutoTokenizer, AutoModelForCausalLM and its generation_config.json (needs
torch; CPU is enough), renders each conversation's prompt with the export's chat template
(apply_chat_template, add_generation_prompt), generates greedily, and counts the replies that end
with an eos token before --max-new-tokens, and those equal to the data's answer. Exit 1 unless
<|im_end|> is among the eos ids and at least --min-stopped of the replies stopped there.

  python3 scripts/gpu/check_generation_stops.py --model OUT/export --data eval.jsonl
"""
import argparse
import json
import sys

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="chat JSONL; the last turn is the answer")
    ap.add_argument("--count", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--min-stopped", type=float, default=0.9)
    args = ap.parse_args()
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    print(f"generation_config eos_token_id {sorted(eos)}; <|im_end|> is {im_end}")
    stopped = correct = 0
    rows = [json.loads(line) for line in open(args.data)][: args.count]
    for row in rows:
        prompt, answer = row["messages"][:-1], row["messages"][-1]["content"]
        ids = tok.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        new = out[0, ids.shape[1]:].tolist()
        ended = bool(new) and new[-1] in eos and len(new) <= args.max_new_tokens
        reply = tok.decode(new, skip_special_tokens=True).strip()
        stopped += ended
        correct += reply.split("</think>")[-1].strip() == answer
        print(f"{'stop' if ended else 'RUN '} {prompt[-1]['content']!r} -> {reply!r}")
    print(f"stopped at eos: {stopped}/{len(rows)}; answer exact: {correct}/{len(rows)}")
    ok = im_end in eos and stopped >= args.min_stopped * len(rows)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
