#!/usr/bin/env python3
"""What a server gets from an export: `deltatune train` of a chat job (tool calls, tools lists) on
a tiny model with Qwen3.5's tokenizer and chat template, a vision tower's and an MTP head's
tensors in its weights, then the export read with Hugging Face's own libraries:

  - a base whose own template deltatune does not render is refused unless the job names a built-in
    one; a base without one trains with its vocabulary's; the export carries the one trained with;
  - AutoTokenizer (transformers) loads the export and apply_chat_template renders every training
    conversation, tools included, exactly as from the base model, and as the committed fixture
    says the Qwen3.5 template renders it;
  - AutoConfig reads the export's config as the base's;
  - the export's safetensors hold exactly the base's tensors (names, shapes, dtypes): the vision
    tower's and MTP head's byte for byte, the trained ones changed.

Loading the weights into AutoModelForCausalLM / AutoModelForImageTextToText needs torch, which CI
does not install; scripts/gpu/gpu_export_check.py does that on the GPU machine.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import tarfile
import tempfile

from harness import CLI, SOURCE, check, run_tests

ROOT = tempfile.mkdtemp(prefix="deltatune-export-")
BASE = os.path.join(ROOT, "base")
OUT = os.path.join(ROOT, "out")
FIXTURES = os.path.join(SOURCE, "tests", "fixtures")
VOCAB = 248320  # Qwen3.5's embedding rows (the tokenizer's ids end at 248076)
IM_END = 248046  # <|im_end|>
UNTOUCHED = {"model.visual.blocks.0.attn.qkv.weight": [24, 8], "model.visual.merger.norm.weight": [8],
             "mtp.fc.weight": [64, 128]}


def read_safetensors(path):
    """Header (name -> dtype, shape, offsets) and the raw data of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return header, data


def tensor_bytes(header, data, name):
    a, b = header[name]["data_offsets"]
    return data[a:b]


def add_tensors(path, shapes, seed):
    """Appends random bf16 tensors to a safetensors file (a multimodal base's extra weights)."""
    header, data = read_safetensors(path)
    rng = random.Random(seed)
    data = bytearray(data)
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= d
        header[name] = {"dtype": "BF16", "shape": shape,
                        "data_offsets": [len(data), len(data) + 2 * count]}
        data += bytes(rng.randrange(256) if i % 2 else 0x3c for i in range(2 * count))
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + data)


def make_base():
    config = json.load(open(os.path.join(SOURCE, "configs", "models", "tiny-a.json")))
    config["vocab_size"] = VOCAB
    config["eos_token_id"] = IM_END  # what the export's generation_config.json takes over
    config_path = os.path.join(ROOT, "base-config.json")
    json.dump(config, open(config_path, "w"))
    subprocess.run([CLI, "init-model", "--config", config_path, "--out", BASE, "--seed", "4"],
                   check=True, stdout=subprocess.DEVNULL)
    add_tensors(os.path.join(BASE, "model.safetensors"), UNTOUCHED, seed=9)
    with tarfile.open(os.path.join(FIXTURES, "tokenizer", "tokenizers.tar.xz")) as t:
        src = t.extractfile("qwen3_5/tokenizer.json")
        open(os.path.join(BASE, "tokenizer.json"), "wb").write(src.read())
    shutil.copy(os.path.join(FIXTURES, "chat", "qwen3_5.jinja"), os.path.join(BASE, "chat_template.jinja"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "model_max_length": 262144},
              open(os.path.join(BASE, "tokenizer_config.json"), "w"))


def training_conversations():
    """Fixture conversations, plain and with tools, and their Qwen3.5 renderings."""
    rows = [json.loads(line) for line in open(os.path.join(FIXTURES, "chat", "conversations.jsonl"))]
    rows = [r for r in rows if isinstance(r["qwen3_5"], str)]  # not the ones the template refuses
    return rows[:6] + [r for r in rows if "tools" in r][:10]


def as_read(messages):
    """The messages as deltatune reads them: tool-call arguments given as a JSON string are that
    object (Qwen3.5's template iterates over them and refuses a string)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)  # OpenAI's nesting or the flat form
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
    return out


def train(conversations, base=BASE, out=OUT, template=None, expect_ok=True):
    """`deltatune train` of `conversations` on `base` (data.chat_template: `template` if given);
    the export folder, or the failed run's stderr when expect_ok is False."""
    data = os.path.join(ROOT, "train.jsonl")
    with open(data, "w") as f:
        for r in conversations:
            f.write(json.dumps({k: v for k, v in r.items() if k in ("messages", "tools")}) + "\n")
    job = os.path.join(ROOT, "job.yaml")
    with open(job, "w") as f:
        named = f"\n  chat_template: {template}" if template else ""
        f.write(f"""model: {base}
output_dir: {out}
data:
  train_files: [{data}]
  format: chat{named}
hyperparameters:
  learning_rate: 0.01
  lr_schedule: constant
  max_steps: 2
  tokens_per_batch: 1024
seed: 1
""")
    r = subprocess.run([CLI, "train", job], capture_output=True, text=True, timeout=600)
    if not expect_ok:
        check(r.returncode != 0, "deltatune train succeeded")
        return r.stderr
    check(r.returncode == 0, f"deltatune train: {r.returncode} {r.stderr[-2000:]}")
    return os.path.join(out, "export")


def test_export_serves():
    make_base()
    conversations = training_conversations()
    export = train(conversations)
    from transformers import AutoConfig, AutoTokenizer

    # The tokenizer side: the same rendering from the export as from the base and the fixture.
    base_tok = AutoTokenizer.from_pretrained(BASE)
    tok = AutoTokenizer.from_pretrained(export)
    for i, r in enumerate(conversations):
        kwargs = {"tools": r["tools"]} if "tools" in r else {}
        messages = as_read(r["messages"])
        got = tok.apply_chat_template(messages, tokenize=False, **kwargs)
        want = base_tok.apply_chat_template(messages, tokenize=False, **kwargs)
        check(got == want, f"conversation {i}: the export renders differently from the base")
        check(got == r["qwen3_5"], f"conversation {i}: the rendering differs from the fixture's")
        check(tok(got)["input_ids"] == base_tok(want)["input_ids"], f"conversation {i}: ids differ")
    check(tok.eos_token == "<|im_end|>", f"eos token {tok.eos_token}")

    # The config as the base's.
    def config(path):
        d = AutoConfig.from_pretrained(path).to_dict()
        d.pop("_name_or_path", None)  # where it was read from
        return d
    check(config(export) == config(BASE), "the export's config differs from the base's")

    # The weights: the base's tensors, the untouched ones byte for byte, the trained ones changed.
    base_h, base_d = read_safetensors(os.path.join(BASE, "model.safetensors"))
    names = [f for f in os.listdir(export) if f.endswith(".safetensors")]
    header, blobs = {}, {}
    for f in names:
        h, d = read_safetensors(os.path.join(export, f))
        for name, meta in h.items():
            check(name not in header, f"{name} in two export files")
            header[name], blobs[name] = meta, tensor_bytes(h, d, name)
    check(sorted(header) == sorted(base_h), f"tensor names differ: {sorted(set(header) ^ set(base_h))}")
    for name, meta in base_h.items():
        check(header[name]["shape"] == meta["shape"], f"{name}: shape {header[name]['shape']}")
        same = blobs[name] == tensor_bytes(base_h, base_d, name)
        if name in UNTOUCHED:
            check(header[name]["dtype"] == meta["dtype"] and same, f"{name} changed")
    trained = "model.layers.0.mlp.down_proj.weight"
    check(blobs[trained] != tensor_bytes(base_h, base_d, trained), f"{trained} did not change")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        check(os.path.exists(os.path.join(export, f)), f"the export has no {f}")
    from transformers import GenerationConfig
    gen = GenerationConfig.from_pretrained(export)
    check(gen.eos_token_id in (IM_END, [IM_END]) and IM_END == tok.convert_tokens_to_ids("<|im_end|>"),
          f"generation eos {gen.eos_token_id}")
    print(f"  export: {len(header)} tensors, {len(conversations)} conversations render as the base's")


def base_variant(name, template):
    """A copy of the base whose chat_template.jinja is `template` (None: the base has none)."""
    path = os.path.join(ROOT, name)
    shutil.copytree(BASE, path)
    os.remove(os.path.join(path, "chat_template.jinja"))
    if template is not None:
        open(os.path.join(path, "chat_template.jinja"), "w").write(template)
    return path


def check_serves_qwen3_5(export, conversations):
    """transformers renders every conversation from the export as Qwen3.5's template does, and
    generation stops at the end of an assistant turn."""
    from transformers import AutoTokenizer, GenerationConfig
    tok = AutoTokenizer.from_pretrained(export)
    for i, r in enumerate(conversations):
        kwargs = {"tools": r["tools"]} if "tools" in r else {}
        got = tok.apply_chat_template(as_read(r["messages"]), tokenize=False, **kwargs)
        check(got == r["qwen3_5"], f"conversation {i}: the export renders differently")
    eos = GenerationConfig.from_pretrained(export).eos_token_id
    check(IM_END in (eos if isinstance(eos, list) else [eos]), f"generation eos {eos}")


def test_the_template_trained_is_the_template_served():
    """A base whose own template deltatune does not render is refused (unless the job names a
    built-in one, which the export then carries); a base without one trains with its vocabulary's
    built-in template, which the export carries."""
    conversations = training_conversations()[:4]
    custom = base_variant("base-custom", "{% for m in messages %}{{ m.content }}{% endfor %}")
    err = train(conversations, base=custom, out=os.path.join(ROOT, "out-custom"), expect_ok=False)
    check("CHAT_TEMPLATE_UNKNOWN" in err and "data.chat_template" in err, f"stderr: {err[-500:]}")
    export = train(conversations, base=custom, out=os.path.join(ROOT, "out-named"),
                   template="qwen3_5")
    check_serves_qwen3_5(export, conversations)
    bare = base_variant("base-bare", None)
    export = train(conversations, base=bare, out=os.path.join(ROOT, "out-bare"))
    check(open(os.path.join(export, "chat_template.jinja")).read() ==
          open(os.path.join(FIXTURES, "chat", "qwen3_5.jinja")).read(), "the export's template")
    check_serves_qwen3_5(export, conversations)


if __name__ == "__main__":
    run_tests([("an export serves: tokenizer, config and weights as the base's", test_export_serves),
               ("the template trained is the template served",
                test_the_template_trained_is_the_template_served)])
