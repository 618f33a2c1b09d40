// reference.cjs - the independent references of tests/tokenizers.py (npm:
// @huggingface/tokenizers, the tokenizer of transformers.js; js-tiktoken,
// OpenAI's GPT-2 ranks).  Offline once `npm ci` has run here.
//   node reference.cjs gpt2-json OUT.json      GPT-2's tokenizer.json, built from js-tiktoken's ranks
//   node reference.cjs hf TOKENIZER.json LINES [hex]  ids and decoded text per line (JSON lines);
//                                               hex: each line holds its text's UTF-8 in hex
//   node reference.cjs hf-special TOKENIZER.json LINES  ids with the template's special tokens
//   node reference.cjs tiktoken LINES           GPT-2 ids per line, by js-tiktoken
//   node reference.cjs gguf FILE                a GGUF file's metadata (typed) and tensor infos, as
//                                               @huggingface/gguf reads them (tests/import_gguf.py)
"use strict";
const fs = require("fs");
const { Tokenizer } = require("@huggingface/tokenizers");
const { Tiktoken } = require("js-tiktoken/lite");
const gpt2 = require("js-tiktoken/ranks/gpt2");

const ranks = gpt2.default || gpt2;
const lines = (p) => { const s = fs.readFileSync(p, "utf8").split("\n"); if (s[s.length - 1] === "") s.pop(); return s; };

// GPT-2's bytes_to_unicode
function byteChars() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const map = new Array(256);
  bs.forEach((b, i) => { map[b] = String.fromCodePoint(cs[i]); });
  return map;
}

// tiktoken's byte-pair merge of one token with the ranks below its own: the
// two parts it was made from (how Hugging Face converts tiktoken files)
function splitOf(bytes, rankOf, limit) {
  let parts = Array.from(bytes, (b) => [b]);
  for (;;) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(parts[i].concat(parts[i + 1]).join(","));
      if (r !== undefined && r < limit && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) break;
    parts.splice(best, 2, parts[best].concat(parts[best + 1]));
  }
  return parts;
}

function gpt2Json(out) {
  const map = byteChars(), rankOf = new Map(), byRank = [];
  for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...toks] = line.split(" ");
    toks.forEach((t, i) => { const b = Array.from(Buffer.from(t, "base64")); rankOf.set(b.join(","), +offset + i); byRank[+offset + i] = b; });
  }
  const str = (b) => b.map((x) => map[x]).join("");
  const vocab = {}, merges = [];
  byRank.forEach((b, r) => { vocab[str(b)] = r; });
  for (let r = 0; r < byRank.length; r++) {
    if (byRank[r].length < 2) continue;
    const parts = splitOf(byRank[r], rankOf, r);
    if (parts.length !== 2) throw new Error("rank " + r + " is not one merge");
    merges.push(str(parts[0]) + " " + str(parts[1]));
  }
  vocab["<|endoftext|>"] = 50256;
  const json = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  fs.writeFileSync(out, JSON.stringify(json));
}

const [cmd, a, b] = process.argv.slice(2);
if (cmd === "gpt2-json") gpt2Json(a);
else if (cmd === "hf") {
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(a, "utf8")), {});
  for (let l of lines(b)) {
    if (process.argv[5] === "hex") l = Buffer.from(l, "hex").toString("utf8");
    const ids = tok.encode(l, { add_special_tokens: false }).ids;
    process.stdout.write(JSON.stringify({ ids, text: ids.length ? tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "" }) + "\n");
  }
} else if (cmd === "hf-special") {
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(a, "utf8")), {});
  for (const l of lines(b)) process.stdout.write(JSON.stringify({ ids: tok.encode(l, { add_special_tokens: true }).ids }) + "\n");
} else if (cmd === "tiktoken") {
  const enc = new Tiktoken(ranks);
  for (const l of lines(a)) process.stdout.write(JSON.stringify({ ids: enc.encode(l) }) + "\n");
} else if (cmd === "gguf") {
  const { gguf } = require("@huggingface/gguf"); // here only: the tokenizer references do without it
  gguf(a, { allowLocalFile: true, typedMetadata: true }).then(({ typedMetadata, tensorInfos, tensorDataOffset }) => {
    const big = (k, v) => (typeof v === "bigint" ? Number(v) : v);
    process.stdout.write(JSON.stringify({ metadata: typedMetadata, tensors: tensorInfos, data: tensorDataOffset }, big) + "\n");
  }, (e) => { console.error(String(e)); process.exit(1); });
} else {
  console.error("usage: see the head of reference.cjs");
  process.exit(2);
}
