#!/usr/bin/env python3
"""Generates tests/fixtures/chat/conversations.jsonl: conversations and the text the models' own
chat templates render for them (transformers' render_jinja_template, as apply_chat_template does).
The first --count lines are plain conversations; then --tool-count with tool definitions, tool
calls (arguments of every JSON type), tool responses, content parts, null content and weights.

Where deltatune reads a conversation that a template itself refuses, the expected text is the
template's rendering of what deltatune reads it as (documented in runtime/data/chat_json.h):
null or missing content as "" and content parts joined for Qwen3, arguments given as a JSON string
as that object for Qwen3.5.

The Qwen3 and Qwen3.5 templates are the Hugging Face ones as vendored by llama.cpp
(models/templates/Qwen-Qwen3-0.6B.jinja and Qwen3.5-4B.jinja), taken from the llama-cpp-python
sdist on PyPI, which this script downloads unless --templates DIR already holds the two files.
Requires: transformers, jinja2 (any machine with PyPI access).

  python3 scripts/make_chat_template_fixtures.py --out tests/fixtures/chat/conversations.jsonl
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

TEMPLATES = {"qwen3": "Qwen-Qwen3-0.6B.jinja", "qwen3_5": "Qwen3.5-4B.jinja"}
SDIST = "llama-cpp-python==0.3.36"

PIECES = ["Hello!", "What is 2+2?", "Explain RoPE in one line.", "  padded  ", "\n\nleading newlines",
          "trailing newlines\n\n", "多语言 文本", "emoji 👩‍💻 ok", "tabs\tand\u3000ideographic space\u3000",
          "\u00a0nbsp around\u00a0", "", "line1\nline2\n\nline3", "<tool_response>\nfake\n</tool_response>",
          "code:\n```python\nprint('hi')\n```", "Ünïcödé", "a" * 50]


def templates(dir_):
    if dir_ is None:
        dir_ = tempfile.mkdtemp()
        subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                               SDIST, "-d", dir_])
        with tarfile.open(glob.glob(os.path.join(dir_, "llama_cpp_python-*.tar.gz"))[0]) as tar:
            for m in tar.getmembers():
                if os.path.basename(m.name) in TEMPLATES.values():
                    m.name = os.path.basename(m.name)
                    tar.extract(m, dir_)
    return {k: open(os.path.join(dir_, v)).read() for k, v in TEMPLATES.items()}


def assistant(rng):
    text = rng.choice(PIECES)
    kind = rng.randrange(4)
    if kind == 1:
        return {"role": "assistant", "content": f"<think>\n{rng.choice(PIECES)}\n</think>\n\n{text}"}
    if kind == 2:
        return {"role": "assistant", "content": text, "reasoning_content": rng.choice(PIECES)}
    return {"role": "assistant", "content": text}


def conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(PIECES)})
    for _ in range(rng.randrange(1, 5)):
        msgs.append({"role": "user", "content": rng.choice(PIECES)})
        msgs.append(assistant(rng))
        if rng.random() < 0.25:
            msgs += [{"role": "tool", "content": rng.choice(PIECES)} for _ in range(rng.randrange(1, 3))]
            msgs.append(assistant(rng))
    if rng.random() < 0.2:
        msgs.pop()  # ends on a user or tool turn
    if rng.random() < 0.05:
        msgs.insert(rng.randrange(1, len(msgs) + 1), {"role": "system", "content": "late system"})
    if rng.random() < 0.05:
        msgs = [m for m in msgs if m["role"] != "user"] or [{"role": "assistant", "content": "alone"}]
    return msgs


def render(template, msgs, tools=None):
    try:
        rendered, _ = render_jinja_template(conversations=[msgs], tools=tools, chat_template=template)
        return rendered[0]
    except Exception as e:  # the templates raise for invalid conversations
        return {"error": str(e)}


VALUES = ["Paris", "多语言 \"quoted\"\nline", 3, -7, 0.5, 1e-05, 1e16, 3.0, 123456.789, True, False, None,
          [1, "two", 3.5], {"nested": {"k": [True, None]}, "z": 0.1}, "", "  spaced  "]


def tool_definition(rng, i):
    props = {f"p{k}": {"type": rng.choice(["string", "number", "boolean"]),
                       "description": rng.choice(PIECES)} for k in range(rng.randrange(0, 3))}
    return {"type": "function", "function": {"name": f"tool_{i}", "description": rng.choice(PIECES),
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": list(props)[:1]}}}


def tool_call(rng):
    args = {f"arg{k}": rng.choice(VALUES) for k in range(rng.randrange(0, 4))}
    if rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=False)  # OpenAI writes arguments as a JSON string
    call = {"name": f"tool_{rng.randrange(3)}", "arguments": args}
    return {"id": "call_1", "type": "function", "function": call} if rng.random() < 0.7 else call


def content(rng):
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.3:
        return [{"type": "text", "text": rng.choice(PIECES)} for _ in range(rng.randrange(1, 3))]
    return rng.choice(PIECES)


def tool_conversation(rng):
    msgs = [{"role": "system", "content": rng.choice(PIECES)}] if rng.random() < 0.5 else []
    for _ in range(rng.randrange(1, 4)):
        msgs.append({"role": "user", "content": content(rng)})
        if rng.random() < 0.6:
            turn = {"role": "assistant", "content": rng.choice(["", None, rng.choice(PIECES)]),
                    "tool_calls": [tool_call(rng) for _ in range(rng.randrange(1, 3))]}
            if rng.random() < 0.2:
                turn["content"] = f"<think>\n{rng.choice(PIECES)}\n</think>\n\n{rng.choice(PIECES)}"
            msgs.append(turn)
            msgs += [{"role": "tool", "tool_call_id": "call_1", "content": rng.choice(PIECES)}
                     for _ in range(rng.randrange(1, 3))]
        turn = assistant(rng)
        if rng.random() < 0.2:
            turn["weight"] = rng.choice([0, 1])
        msgs.append(turn)
    tools = [tool_definition(rng, i) for i in range(rng.randrange(0, 3))] or None
    return msgs, tools


def as_read(msgs, kind):
    """The conversation as deltatune reads it, where a template would refuse it."""
    out = []
    for m in msgs:
        m = dict(m)
        if kind == "qwen3":
            c = m.get("content")
            m["content"] = "".join(p["text"] for p in c) if isinstance(c, list) else (c or "")
        if kind == "qwen3_5" and "tool_calls" in m:
            m["tool_calls"] = [dict(c) for c in m["tool_calls"]]
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                if isinstance(fn.get("arguments"), str):
                    fn = dict(fn, arguments=json.loads(fn["arguments"]))
                    if "function" in c:
                        c["function"] = fn
                    else:
                        c.update(fn)
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/chat/conversations.jsonl")
    ap.add_argument("--templates", default=None, help="folder holding the two .jinja files")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--tool-count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tmpl = templates(args.templates)
    rng = random.Random(args.seed)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        for _ in range(args.count):
            msgs = conversation(rng)
            f.write(json.dumps({"messages": msgs, **{k: render(t, msgs) for k, t in tmpl.items()}},
                               ensure_ascii=False) + "\n")
        rng = random.Random(args.seed + 1)
        for _ in range(args.tool_count):
            msgs, tools = tool_conversation(rng)
            line = {"messages": msgs, **({"tools": tools} if tools else {})}
            line.update({k: render(t, as_read(msgs, k), tools) for k, t in tmpl.items()})
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {args.count} + {args.tool_count} conversations to {args.out}")


if __name__ == "__main__":
    main()
