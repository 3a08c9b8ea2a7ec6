"""Tokenizer references from Hugging Face `tokenizers` (the Rust library), a second implementation beside the
JS one that made ../shared/fixtures/*/vectors.jsonl.

For every shared fixture vocabulary it encodes strings the fixture vectors do not hold (a curated list of
pre-tokenizer, normaliser and special-token edge cases, and seeded random strings from a pool of characters
chosen to stress them), with and without special tokens, and decodes seeded random id sequences (special ids
and lone byte pieces included, with and without skip_special_tokens). It also encodes the fixture's own
vector strings and reports how many ids agree with the JS reference, so that the two references are checked
against each other. Imported by generate.py (target "tokenizers"); needs only the `tokenizers` package.
"""

import hashlib
import json
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

from oracle_rng import splitmix64

# name -> tokenizer.json (relative to ../shared/fixtures) and the fixture vectors made by the JS reference.
VOCABS = [
    {"name": "llama3", "tokenizer": "tokenizers/llama3/tokenizer.json", "vectors": "tokenizers/llama3/vectors.jsonl"},
    {"name": "qwen3", "tokenizer": "tokenizers/qwen3/tokenizer.json", "vectors": "tokenizers/qwen3/vectors.jsonl"},
    {"name": "mistral-like-32k", "tokenizer": "tokenizers/mistral-like-32k/tokenizer.json",
     "vectors": "tokenizers/mistral-like-32k/vectors.jsonl"},
    {"name": "stories260k", "tokenizer": "stories260k/tokenizer.json",
     "vectors": "stories260k/tokenizer_vectors.jsonl"},
]

# Edge cases the fixture vectors do not hold. Each names what it stresses.
CURATED = [
    "  \n  \n",  # \s*[\r\n]+ against \s+(?!\S)
    "a \n b",
    "x\r\n\r\ny",
    " \t\n\t ",
    "end with spaces   ",
    "word\u3000word",  # ideographic space
    "\u2028line separator\u2029paragraph",
    "\u0085next line",
    "12345678901234567890",  # digit groups of three (Llama-3) or one (Qwen3)
    "3,141,592.653",
    "٣٤٥ arabic-indic digits",
    "½ ² ① Ⅻ",  # numbers that are not decimal digits
    "I'M HERE, you'Re there, WE'VE GONE",
    "don't'll've",
    "''quoted''",
    "x's",
    "rock'n'roll",
    "ＦＵＬＬ　ｗｉｄｔｈ ０１２",
    "ﬁne ﬂow",  # ligatures (NFKC would change them, NFC does not)
    "e\u0301 vs \u00e9",  # decomposed and precomposed
    "\u1100\u1161\u11a8",  # conjoining jamo (NFC composes)
    "Å vs A\u030a",
    "ẞ ß ǅ",
    "İstanbul ıi",
    "ΣΑΣ σας",
    "עברית מימין לשמאל",
    "ภาษาไทยไม่มีช่องว่าง",
    "Tiếng Việt có dấu",
    "ሰላም ልዑል",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟙𝟚𝟛",
    "∀x∈ℝ: x²≥0 ⇒ √x² = |x|",
    "☃️ ❤️ ✔︎",  # variation selectors
    "🏳️\u200d🌈 flag",
    "🫠🫡🪿",  # newer emoji (likely byte pieces)
    "a\u00adb soft hyphen",
    "\ufeffbyte order mark",
    "tab\u000bvertical\u000cform",
    "\x7f delete \x1b[0m escape",
    "| col | col |\n|-----|-----|\n| 1   | 2   |",
    '{"key": [1, 2.5, null, true], "k2": "v"}',
    "    def f(self):\n        return {'a': 1}\n",
    "<<<>>>  ==>  <=>  !==",
    "........",
    "—–-‒―",
    "“curly” ‘quotes’ «guillemets»",
    "mixedCASEWordsAndNUMBERS123abc456",
    "a" * 120,
    "ab" * 70,
    " " * 50 + "x",
    "\n" * 9,
    "🙂" * 12,
    "中文" * 20,
    "▁already▁has▁metaspace",
    "<0x41> not a byte token",
    "<|begin_of_text|><|begin_of_text|>",
    "<|eot_id|>trailing",
    "<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> text",
    "</s><s>",
    "<s> leading special",
    "almost<|im_start",
    "<|reserved_special_token_5|>",
    "<think>\nreasoning\n</think>",
]

# Characters for the random strings: whitespace variety, digits, contractions, letters of several scripts,
# combining marks, emoji, special-token fragments and literals, NFC-affected and control characters.
POOL = [
    "a", "b", "Q", "z", "the", "The", " the", "'s", "'LL", "'", "0", "7", "12", "345", " ", "  ", "\t", "\n",
    "\r", "\r\n", "\n\n", ".", ",", "!", "?", "-", "_", "(", ")", "<", ">", "|", "/", "\\", "\"", "é", "ü", "ß",
    "e\u0301", "\u0301", "Ω", "σ", "ж", "Я", "中", "文", "の", "한", "\u1100\u1161", "ไ", "ש", "ع", "𝟙", "½",
    "😀", "👍🏽", "\u200d", "🦙", "\ufe0f", "\u00a0", "\u3000", "\u200b", "\x00", "\x01", "\x7f", "€", "▁",
    "<s>", "</s>", "<|", "|>", "<|eot_id|>", "<|im_start|>", "<|endoftext|>",
]

RANDOM_TEXTS = 120
RANDOM_TEXT_SEED = 19
RANDOM_DECODES = 40
RANDOM_DECODE_SEED = 23


class _Rng:
    """splitmix64: the same draws on every Python version."""

    def __init__(self, seed):
        self.state = seed

    def below(self, n):
        self.state, r = splitmix64(self.state)
        return r % n


def random_texts():
    rng, out = _Rng(RANDOM_TEXT_SEED), []
    for _ in range(RANDOM_TEXTS):
        out.append("".join(POOL[rng.below(len(POOL))] for _ in range(rng.below(41))))
    return out


def random_id_lists(tok, seed):
    """Id sequences to decode: ordinary ids, special (added) ids and single byte pieces, mixed."""
    rng, vocab = _Rng(seed), tok.get_vocab_size(with_added_tokens=True)
    added = sorted(tok.get_added_tokens_decoder().keys())
    byte_ids = [i for i in range(vocab) if (tok.id_to_token(i) or "").startswith("<0x")]
    out = []
    for _ in range(RANDOM_DECODES):
        ids = []
        for _ in range(1 + rng.below(24)):
            kind = rng.below(8)
            if kind == 0 and added:
                ids.append(added[rng.below(len(added))])
            elif kind == 1 and byte_ids:
                ids.append(byte_ids[rng.below(len(byte_ids))])
            else:
                ids.append(rng.below(vocab))
        out.append(ids)
    return out


def encode_row(tok, text):
    plain = tok.encode(text, add_special_tokens=False)
    return {
        "text": text,
        "ids": tok.encode(text, add_special_tokens=True).ids,
        "ids_no_special": plain.ids,
        "tokens_no_special": plain.tokens,
        "decoded": tok.decode(plain.ids, skip_special_tokens=False),
    }


def cross_check(tok, vectors_path):
    """How the library agrees with the JS reference's fixture vectors (reported, not asserted here)."""
    rows = [json.loads(line) for line in Path(vectors_path).read_text().splitlines() if line.strip()]
    agree = {"rows": len(rows), "ids": 0, "ids_no_special": 0, "decoded": 0, "differ": []}
    for r in rows:
        ours = encode_row(tok, r["text"])
        same = {k: ours[k] == r[k] for k in ("ids", "ids_no_special", "decoded")}
        for k, v in same.items():
            agree[k] += v
        if not all(same.values()):
            agree["differ"].append({"text": r["text"], "fields": [k for k, v in same.items() if not v]})
    return agree


def reference(fixtures, vocab, generator):
    path = Path(fixtures) / vocab["tokenizer"]
    tok = Tokenizer.from_file(str(path))
    texts = CURATED + random_texts()
    decodes = []
    for i, ids in enumerate(random_id_lists(tok, RANDOM_DECODE_SEED + len(vocab["name"]))):
        skip = i % 2 == 1
        decodes.append({"ids": ids, "skip_special_tokens": skip, "decoded": tok.decode(ids, skip_special_tokens=skip)})
    return {
        "generator": dict(generator, tokenizers=tokenizers.__version__),
        "tokenizer": vocab["tokenizer"],
        "tokenizer_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "note": "encode: Tokenizer.encode(text, add_special_tokens=True/False); decoded: decode(ids_no_special, "
                "skip_special_tokens=False). Strings: the curated edge cases, then seeded random strings.",
        "agreement_with_fixture_vectors": cross_check(tok, Path(fixtures) / vocab["vectors"]),
        "encode": [encode_row(tok, t) for t in texts],
        "decode": decodes,
    }
