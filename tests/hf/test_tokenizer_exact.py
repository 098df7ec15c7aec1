"""Exactness of engine/text/tokenizer.c against Hugging Face tokenizers.

Trains tokenizers of both families with the reference library on Debian text
(fortunes, common-licenses: the training corpus; /usr/share/doc/*/copyright:
held out), in the shapes real checkpoints use:
  gpt2      ByteLevel pre-tokenizer (GPT-2 split pattern), ByteLevel decoder
  gpt2-nfkc the same with add_prefix_space, an NFKC normalizer, RobertaProcessing
  llama3    Split(Llama-3 pattern) + ByteLevel(use_regex=false), BOS template
  qwen2     NFC normalizer, Split(Qwen2 pattern: single digits), ByteLevel, and
            the model keys as Qwen's files spell them ("" prefix and suffix)
  variety   the other supported components: NFKD, a Regex Replace normalizer,
            Split with each behaviour (Removed, MergedWithPrevious,
            MergedWithNext, Contiguous, inverted), a String pattern, no decoder
  metaspace-first, metaspace-never
            SentencePiece-style with the Metaspace pre-tokenizer (prepend_scheme
            first, never) and decoder, unk without byte fallback
  spm       SentencePiece-style BPE (Llama 2, TinyLlama, Mistral): Prepend and
            Replace normalizers, no pre-tokenizer, byte fallback, <unk>,
            the Replace/ByteFallback/Fuse/Strip decoder, BOS template
  deepseek, deepseek-runs
            DeepSeek LLM/Coder/V2's layout: an empty normalizer Sequence; a
            Sequence of five Splits (newlines, Latin-like letters, ASCII and
            CJK punctuation, trailing spaces, CJK/Hangul), Digits
            (individual_digits true; -runs: false) and ByteLevel(use_regex
            false); the BOS template. Trained with runs of digits (and seeded
            numbers in five digit scripts), so that merges would join digits
            wherever a split differs from tokenizers'
  digits, digits-runs
            the Digits pre-tokenizer alone (true; false), character-level
            BPE with unk, trained the same way
  numeric-all
            every code point but the surrogates, each between two "a"s, through
            Digits(true) + ByteLevel and a hand-made vocabulary that merges "a"
            with any byte next to it: a character's ids show whether it was
            split off, so the ids agree only if char::is_numeric does (on its
            own texts, not the common ones)
  zoffload  the directory `zoffload tokenizer train` writes (when the zoffload
            binary is given): loaded by the reference and by transformers'
            AutoTokenizer, whose ids must equal the reference's
then writes the reference's ids and decodes for held-out text (copyright
files, hand-written multi-script text with emoji, combining marks, runs of
spaces and newlines, digits, contractions, special tokens, and seeded random
strings over those characters) and runs the C checker on them, which compares
ids with and without special tokens, decode with and without skipping special
tokens, and decode(encode(x)) == x wherever the reference round-trips. Zero
mismatches pass.

Invalid UTF-8: the reference takes str, so it cannot see invalid bytes. Our
encoder repairs them as Python's bytes.decode("utf-8", "replace") does (each
maximal invalid subpart becomes U+FFFD); the cases feed the raw bytes to ours
and the repaired text to the reference.

Usage: tests/hf/run.sh test-engine-tokenizer REPO test_tokenizer_exact.py [ZOFFLOAD]
"""
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers, Regex

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def corpus(max_bytes=1_200_000):
    """The licenses and fortune files up to max_bytes (training time is most of this test's)."""
    train, total = [], 0
    for f in (sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f)) +
              sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                     if os.path.isfile(f) and not f.endswith((".dat", ".u8")) and not os.path.islink(f))):
        if total > max_bytes:
            break
        train.append(f)
        total += os.path.getsize(f)
    held = sorted(glob.glob("/usr/share/doc/*/copyright"))
    return train, held


HANDWRITTEN = [
    "Hello world! It's a test, isn't it? I'LL go; she'S here; we'Re done; 'd 'm 'll 've 't",
    "Γειά σου Κόσμε · Привет, мир! · Здравствуйте · Ελληνικά",
    "你好，世界。東京は日本の首都です。안녕하세요 세계 — 中文字符测试",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก",
    "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ ✨🎉",
    "combining: e\u0301 a\u0300 n\u0303 Z\u0351\u0300\u0336a\u0334\u0317l\u0335go and cafe\u0301 vs caf\u00e9",
    "spaces:    four   three  two \t tab\t\ttabs  \n\nnewlines\n\n\n  \r\n\r\nCRLF   \n   ",
    "      leading and trailing      ",
    "\n\n\n",
    "digits 0 12 345 6789 1234567890 3.14159 1,000,000 ٣٤٥ ১২৩ ⅷ ½ ²³",
    "numbers: $1,234.56 and €99,99; 2024-01-15T12:30:45Z v1.2.3 0x1F 1e-10 3rd 21st 007 -42 +7 10% 1/2 3:45pm",
    "non-ASCII digits: ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴ ０１２３４５６７８９ १२३४ ๑๒๓ ᠑᠒᠓ 𝟎𝟏𝟐𝟗 ①②⑳ ⅠⅡⅫ ¼½¾ ¹²³ 〇〡〢 𐄇𐄈 𑽐𑽑 𝋀𝋁",
    "mixed scripts: abc١٢٣def ٣٤abc 中文123日本語４５６ 한국어2024년 Ελληνικά42 рубль99 x²+y³ H₂O 第3章 ３月１４日",
    "contractions: don't won't can't I'm you're they've we'd he'll O'Neil 'quoted' ſ'S",
    "odd spaces:\u00a0nbsp\u2003em\u3000ideographic\u180emongolian\u200bzwsp\u2028ls\u2029ps\u0085nel\u000bvt\u000cff",
    "specials: <|endoftext|> in the middle<|endoftext|>and<|endoftext|><|endoftext|> <s> </s> <unk> <|begin_of_text|>",
    "partial specials: <|endof <|endoftext| <s </s <|eot_id|><|start_header_id|>user<|end_header_id|>",
    "fullwidth ＡＢＣ１２３ ligature ﬁ ﬂ ㎏ ℌ Ⅻ ① ﹏ and compatibility ＂quotes＂",
    "mixed: abc123def 456ghi ___ *** ... --- !!! ??? ((())) [[]] {{}} <<>> @@@ ### $$$ %%% ^^^ &&&",
    "code: def f(x):\n    return x ** 2  # comment\n\tif (a && b) { printf(\"%d\\n\", a); }\n",
    "URLs https://www.debian.org/doc/ and e-mail root@localhost.localdomain",
    "a",
    " ",
    "",
    "▁already▁has▁metaspace ▁ ▁▁",
    "<0x41> <0xFF> literal byte names",
    "strip: a <mask> b  <mask>  c\u3000<mask>\u00a0d <mask><mask> [R]  x [R]\n\ny \t<both>\t z<both> <both>",
]

INVALID = [
    b"invalid \xff byte",
    b"lone lead \xc3 then ascii",
    b"truncated \xe2\x82 euro",
    b"overlong \xc0\xaf slash",
    b"surrogate \xed\xa0\x80 half",
    b"too big \xf4\x90\x80\x80 done",
    b"\x80\x80\x80 continuation run",
    b"mix \xe2\x82\xac ok \xe2\x82 bad \xf0\x9f\x98 bad emoji \xf0\x9f\x98\x80 ok",
    b"\xfe\xfe<|endoftext|>\xff",
]

POOL = list("aAzZ019 '\t\n\r.,!?-_<>|/sStTdDmMlLvVrReE") + [
    "é", "ß", "ſ", "K", "Ω", "Ж", "中", "日", "한", "ع", "ש", "न", "ि", "ก", "😀", "👍", "🏽", "\u200d", "\u0301",
    "\u00a0", "\u3000", "\u180e", "\u2028", "\u0085", "\u000b", "▁", "ﬁ", "①", "½", "٣", "  ", "\n\n", "'s", "'LL",
    "<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>", "<|eot_id|>", "\U0001F1EB", "\U0001F1F7", "\ufffd",
    "\x00", "\x7f", "\u2003", "<mask>", "[R]", "<both>", "５", "𝟙", "ⅷ", "²", "٤", "०", "𑽑", "123", "3.5",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(POOL) for _ in range(k)))
    return out


def train_gpt2(files, vocab, nfkc=False):
    tk = Tokenizer(models.BPE())
    if nfkc:
        tk.normalizer = normalizers.NFKC()
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=nfkc)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=True)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train(files, tr)
    tk.add_tokens(["<|pad|>"])
    tk.add_special_tokens([AddedToken("<mask>", lstrip=True), AddedToken("[R]", rstrip=True, normalized=True),
                           AddedToken("<both>", lstrip=True, rstrip=True)])
    if nfkc:  # RoBERTa's post-processor: <cls> $A <sep>
        tk.post_processor = processors.RobertaProcessing(sep=("<|endoftext|>", tk.token_to_id("<|endoftext|>")),
                                                         cls=("<|pad|>", tk.token_to_id("<|pad|>")))
    return tk


def train_llama3(files, vocab):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train(files, tr)
    bos = tk.token_to_id("<|begin_of_text|>")
    tk.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tk


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_qwen2(files, vocab, tmp):
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train(files, tr)
    j = json.loads(tk.to_str())
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    path = os.path.join(tmp, "qwen2-tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_file(path)


def train_variety(files, vocab):
    tk = Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Replace(Regex(r"[0-9]{2,}"), "<num>")])
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{P}"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[\r\n\t]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{L}{1,4}"), behavior="removed", invert=True)])
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["[UNK]", "[SEP]"], limit_alphabet=80,
                             show_progress=False)
    tk.train(files, tr)
    tk.post_processor = processors.TemplateProcessing(single="$A [SEP]", pair="$A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[SEP]", tk.token_to_id("[SEP]"))])
    return tk


def train_metaspace(files, vocab, scheme):
    """SentencePiece-style BPE with the Metaspace pre-tokenizer and decoder (older converted files)."""
    tk = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", add_prefix_space=True, prepend_scheme=scheme)
    tk.decoder = decoders.Metaspace(replacement="▁", add_prefix_space=True)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                             show_progress=False)
    tk.train(files, tr)
    return tk


def train_spm(files, vocab, tmp):
    """Llama 2's tokenizer.json shape, trained with a Metaspace-like split, then saved without a pre-tokenizer."""
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                             limit_alphabet=120, show_progress=False)
    tk.train(files, tr)
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B:1",
                                                      special_tokens=[("<s>", tk.token_to_id("<s>"))])
    j = json.loads(tk.to_str())
    j["pre_tokenizer"] = None
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in set(byte_tokens)]
    path = os.path.join(tmp, "spm-tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_file(path)


# DeepSeek LLM / Coder / V2's pre-tokenizer, reproduced from memory of their tokenizer.json (the letter class
# as remembered; characters that NFC would change written as escapes), with Digits(individual_digits) before ByteLevel.
DEEPSEEK_LETTERS = ("\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚ"
                    "Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳ"
                    "Ꙁ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+")
DEEPSEEK_SPLITS = ["[\r\n]", DEEPSEEK_LETTERS, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+"]
DEEPSEEK_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]


def numbers_file(tmp):
    """Seeded lines of numbers in five digit scripts, so that a vocabulary learns merges of digits."""
    rng = random.Random(5)
    zeros = [0x30, 0x660, 0x6F0, 0x966, 0xFF10]
    lines = []
    for _ in range(3000):
        z = rng.choice(zeros)
        nums = ["".join(chr(z + rng.randrange(10)) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 5))]
        lines.append(rng.choice([" ", ", ", " and ", "-", "."]).join(nums))
    path = os.path.join(tmp, "numbers.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def with_individual_digits(tk, individual, path):
    """tk saved to path with every Digits' individual_digits set, and read back. Trained with runs of digits,
    the vocabulary has merges that would join digits: a split that is not tokenizers' shows in the ids."""
    j = json.loads(tk.to_str())
    pre = j["pre_tokenizer"]
    for p in pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]:
        if p["type"] == "Digits":
            p["individual_digits"] = individual
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_file(path)


def train_deepseek(files, vocab, individual, tmp):
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.Sequence([])  # as DeepSeek's files have it
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK_SPLITS] +
        [pre_tokenizers.Digits(individual_digits=False),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=DEEPSEEK_SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train(files + [numbers_file(tmp)], tr)
    bos = tk.token_to_id(DEEPSEEK_SPECIALS[0])
    tk.post_processor = processors.TemplateProcessing(single=DEEPSEEK_SPECIALS[0] + " $A",
                                                      pair=DEEPSEEK_SPECIALS[0] + " $A $B:1",
                                                      special_tokens=[(DEEPSEEK_SPECIALS[0], bos)])
    return with_individual_digits(tk, individual, os.path.join(tmp, "deepseek-%s.json" % individual))


def train_digits(files, vocab, individual, tmp):
    """The Digits pre-tokenizer alone: character-level BPE (a run of digits one piece, or each digit). Spaces
    become ▁ first: tokenizers 0.15 writes a merge as "a b", which a token holding a space would break."""
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.pre_tokenizer = pre_tokenizers.Digits(individual_digits=False)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>"], limit_alphabet=150, show_progress=False)
    tk.train(files + [numbers_file(tmp)], tr)
    return with_individual_digits(tk, individual, os.path.join(tmp, "digits-%s.json" % individual))


def numeric_all(tmp):
    """Digits + ByteLevel over a vocabulary of the 256 byte characters and "a" merged with each of them on
    either side, and texts holding every code point but the surrogates between "a"s. A character that is
    not numeric stays in one piece with its "a"s and merges with them; a numeric one is a piece alone."""
    bl = pre_tokenizers.ByteLevel.alphabet()
    chars = sorted(bl)
    tokens = list(chars)
    merges = []
    for left in (True, False):
        for c in chars:
            pair = ("a", c) if left else (c, "a")
            if "".join(pair) not in tokens:
                tokens.append("".join(pair))
                merges.append(" ".join(pair))
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Digits", "individual_digits": True},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
         "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                             "use_regex": False},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                   "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
    path = os.path.join(tmp, "numeric-all.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    tk = Tokenizer.from_file(path)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = ["a" + "a".join(chr(c) for c in cps[i:i + 4096]) + "a" for i in range(0, len(cps), 4096)]
    # Every numeric character must come out alone: ids show it (a numeric one is split off, merging with nothing).
    numeric = sum(1 for t in texts for p, _ in pre_tokenizers.Digits(individual_digits=True).pre_tokenize_str(t)
                  if "a" not in p)
    return tk, [t.encode("utf-8") for t in texts], numeric


def train_zoffload(zoffload, files, vocab, tmp):
    out = os.path.join(tmp, "zoffload-trained")
    subprocess.run([zoffload, "tokenizer", "train", "--vocab-size", str(vocab), "--out", out,
                    "--special", "<|im_start|>", "--special", "<|im_end|>"] + files, check=True)
    return out


def main():
    checker = sys.argv[1]
    zoffload = sys.argv[2] if len(sys.argv) > 2 else None
    train, held = corpus()
    if not train:
        print("SKIP: no Debian text corpus (/usr/share/games/fortunes, /usr/share/common-licenses)")
        return 77
    held_texts = []
    total = 0
    for f in held:
        t = read(f)
        held_texts.append(t)
        total += len(t)
        if total > 300_000:
            break
    texts = [t.encode("utf-8") for t in HANDWRITTEN + held_texts + random_texts(2000, 1234)]
    texts += INVALID
    # The same strings glued to each other, so pieces meet at new boundaries.
    rng = random.Random(99)
    texts += [b"".join(rng.choice(texts[:len(HANDWRITTEN)]) for _ in range(4)) for _ in range(200)]

    with tempfile.TemporaryDirectory() as tmp:
        kinds = {
            "gpt2": train_gpt2(train, 3000),
            "gpt2-nfkc": train_gpt2(train, 1500, nfkc=True),
            "llama3": train_llama3(train, 3000),
            "qwen2": train_qwen2(train, 1500, tmp),
            "spm": train_spm(train, 2000, tmp),
            "variety": train_variety(train, 800),
            "metaspace-first": train_metaspace(train, 700, "first"),
            "metaspace-never": train_metaspace(train, 700, "never"),
            "deepseek": train_deepseek(train, 2000, True, tmp),
            "deepseek-runs": train_deepseek(train, 2000, False, tmp),
            # Unsplit lines make BPE training slow: the licenses and the first fortune files suffice here.
            "digits": train_digits(train[:16], 800, True, tmp),
            "digits-runs": train_digits(train[:16], 800, False, tmp),
        }
        own_texts = {}
        kinds["numeric-all"], own_texts["numeric-all"], n_numeric = numeric_all(tmp)
        print(f"numeric-all: {n_numeric} numeric code points by tokenizers' Digits", flush=True)
        auto = None
        if zoffload:
            from transformers import AutoTokenizer
            d = train_zoffload(zoffload, train, 4000, tmp)
            kinds["zoffload"] = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            auto = AutoTokenizer.from_pretrained(d)
            if auto.eos_token != "<|endoftext|>" or auto.bos_token != "<|endoftext|>":
                print(f"FAIL: AutoTokenizer eos {auto.eos_token!r} bos {auto.bos_token!r}, want <|endoftext|>")
                return 1
        out = {"tokenizers": []}
        n_cases = 0
        for name, tk in kinds.items():
            d = os.path.join(tmp, name)
            os.makedirs(d)
            tk.save(os.path.join(d, "tokenizer.json"))
            entry = {"name": name, "path": d}
            if name == "zoffload":
                shutil.copy(os.path.join(tmp, "zoffload-trained", "tokenizer_config.json"), d)
                entry.update(eos=auto.eos_token_id, bos=auto.bos_token_id)
            cases = []
            for raw in own_texts.get(name, texts):
                text = raw.decode("utf-8", "replace")
                ids = tk.encode(text, add_special_tokens=False).ids
                ids_sp = tk.encode(text, add_special_tokens=True).ids
                if name == "zoffload" and auto(text)["input_ids"] != ids_sp:
                    print(f"FAIL: transformers' AutoTokenizer and tokenizers differ on {text[:80]!r}")
                    return 1
                dec = tk.decode(ids, skip_special_tokens=False)
                cases.append({"text": raw.hex(), "ids": ids, "ids_special": ids_sp,
                              "decoded": dec.encode("utf-8").hex(),
                              "decoded_skip": tk.decode(ids_sp, skip_special_tokens=True).encode("utf-8").hex(),
                              "roundtrip": dec == text and raw == text.encode("utf-8")})
            vs = tk.get_vocab_size(with_added_tokens=True)
            drng = random.Random(7)
            for _ in range(300):
                ids = [drng.randrange(vs + 3) for _ in range(drng.randint(0, 12))]
                ids = [i for i in ids if tk.id_to_token(i) is not None]
                cases.append({"decode_ids": ids,
                              "decoded": tk.decode(ids, skip_special_tokens=False).encode("utf-8").hex(),
                              "decoded_skip": tk.decode(ids, skip_special_tokens=True).encode("utf-8").hex()})
            n_cases += len(cases)
            entry["cases"] = cases
            out["tokenizers"].append(entry)
        cases_path = os.path.join(tmp, "cases.json")
        with open(cases_path, "w") as f:
            json.dump(out, f)
        print(f"{len(kinds)} tokenizers, {n_cases} cases ({len(texts)} texts each, "
              f"{sum(len(t) for t in texts) / 1e6:.2f} MB), checking with {os.path.basename(checker)}", flush=True)
        rc = subprocess.run([checker, "--cases", cases_path]).returncode
        if zoffload and rc == 0:
            # bench tokenize's own cross-check: the same ids from the reference's encode_batch.
            env = dict(os.environ, ZO_HF_SITE=os.environ.get("PYTHONPATH", "").split(":")[0], ZO_HF_PYTHON=sys.executable)
            out = subprocess.run([zoffload, "bench", "tokenize", "--tokenizer", os.path.join(tmp, "llama3"),
                                  "--threads", os.environ.get("OMP_NUM_THREADS", "2"), "--reps", "1"] + held[:40],
                                 env=env, capture_output=True, text=True)
            print(out.stdout.strip())
            if out.returncode != 0 or "ids identical" not in out.stdout:
                print(f"FAIL: bench tokenize: {out.stderr.strip()}")
                rc = 1
        return rc


if __name__ == "__main__":
    sys.exit(main())
