#!/usr/bin/python3
"""What fixformer writes under a file-size limit, the JSON it reads, and the
packed-weight cache's key.

  * Under a file-size limit (RLIMIT_FSIZE, `ulimit -f`; SIGXFSZ at its
    default, which kills) every writing command fails with exit 1 and one
    line naming the file and "File too large", leaving nothing: no
    temporaries (*.tmp*), no partial file, no new folder, an earlier file
    as it was.  init, emit (plain, --weights, --embed, --with-main), import,
    run --output, generate --logits, the emitted driver's --output, and
    printed output redirected to a file (info > FILE).  The cache is an
    aid: a packed-weight blob that cannot be stored (tcc, cc) leaves the run
    on the blob in memory, exit 0, the same numbers; a cc object that
    cannot be written fails the cc engine with one line and no temporaries
    in the cache.
  * A key twice in one JSON object (cJSON reads the first, Python's json the
    last) is refused by every reader, naming the file and the key:
    config.json (rope_scaling twice: the refusal of RoPE scaling is not
    bypassed), model.safetensors.index.json, safetensors headers (a
    tensor's dtype twice, __metadata__) in run and import, tokenizer.json
    and the JSON vocabulary.
  * The packed weights follow the weights file's content: rewritten in
    place with other values of the same size and its mtime put back, within
    the same second, on this file system and on one that keeps whole seconds
    (stat's fractions zeroed by an LD_PRELOAD shim, as ext3 or FAT show
    them); and a file rewritten between its hash and its packing (a shim
    again) does not leave the new bytes' blob under the old bytes' hash.

  hardening_io.py --fixformer BIN [--cc CC]
"""
import argparse
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TINY = os.path.join(ROOT, "models", "tiny.lua")
LLAMA = os.path.join(ROOT, "models", "llama_tiny.lua")
failures = passed = 0


class Failure(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failure(what)


def limited(limit):
    """preexec_fn: files at most limit bytes, SIGXFSZ at its default (death)"""
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return set_limit


class Env:
    def __init__(self, ff, cc, tmp):
        self.ff, self.cc, self.tmp, self.n = ff, cc, tmp, 0
        self.cache = self.path("cache")
        self.tiny_w = self.path("tiny.safetensors")
        self.llama_w = self.path("llama.safetensors")
        self.must(self.run(["init", TINY, "-o", self.tiny_w]))
        self.must(self.run(["init", LLAMA, "-o", self.llama_w]))

    def path(self, name):
        """a new name in the temporary folder"""
        self.n += 1
        return os.path.join(self.tmp, "%02d-%s" % (self.n, name))

    def run(self, args, limit=None, cache=None, env=None, binary=None):
        e = dict(os.environ, XDG_CACHE_HOME=cache or self.cache, **(env or {}))
        return subprocess.run([binary or self.ff] + args, capture_output=True, text=True, timeout=120, env=e,
                              preexec_fn=limited(limit) if limit else None)

    def must(self, p):
        if p.returncode != 0:
            raise Failure("%s: exit %d: %s" % (" ".join(p.args[:3]), p.returncode, p.stderr.strip()))
        return p

    def temporaries(self):
        return [os.path.join(d, n) for d, _, names in os.walk(self.tmp) for n in names if ".tmp" in n]

    def refused(self, p, *pieces):
        """exit 1, one stderr line holding each piece, no temporary anywhere"""
        err = p.stderr.strip()
        check(p.returncode == 1, "exit %d (want 1; -25 is SIGXFSZ): %s" % (p.returncode, err))
        check(len(err.splitlines()) == 1, "stderr is not one line: %r" % err)
        for x in pieces:
            check(x in err, "message lacks %r: %s" % (x, err))
        left = self.temporaries()
        check(not left, "temporaries left: %s" % left)
        return err


# ---- writes under a file-size limit ------------------------------------------------------------

def init_under_size_limit(e):
    out = e.path("w.safetensors")
    e.refused(e.run(["init", TINY, "-o", out], limit=100000), out, "File too large")
    check(not os.path.exists(out), "init left %s" % out)
    with open(out, "w") as f:
        f.write("earlier")
    e.refused(e.run(["init", TINY, "-o", out], limit=100000), "File too large")
    check(open(out).read() == "earlier", "init changed the earlier file")


def emit_under_size_limit(e):
    variants = [("plain", []), ("weights", ["--weights", e.tiny_w]), ("embed", ["--weights", e.tiny_w, "--embed"]),
                ("with-main", ["--with-main"]), ("weights, with-main", ["--weights", e.tiny_w, "--with-main"])]
    for what, flags in variants:
        good = e.path("emit-good")
        e.must(e.run(["emit", TINY, "-o", good] + flags))
        sizes = sorted(os.path.getsize(os.path.join(good, n)) for n in os.listdir(good))
        out = e.path("emit")
        try:  # the largest file does not fit, the others do
            e.refused(e.run(["emit", TINY, "-o", out] + flags, limit=sizes[-1] - 1), "File too large")
            check(not os.path.exists(out), "a new folder %s was left" % out)
            os.mkdir(out)  # an earlier emit's files stay as they were
            for n in os.listdir(good):
                with open(os.path.join(out, n), "w") as f:
                    f.write("earlier " + n)
            e.refused(e.run(["emit", TINY, "-o", out] + flags, limit=sizes[-1] - 1), "File too large")
            for n in os.listdir(good):
                check(open(os.path.join(out, n)).read() == "earlier " + n, "%s changed" % n)
            check(sorted(os.listdir(out)) == sorted(os.listdir(good)), "new files: %s" % os.listdir(out))
        except Failure as x:
            raise Failure("emit %s: %s" % (what, x))


def hf_llama(folder, config_text=None, header_edit=None, index=False):
    """a tiny LlamaForCausalLM folder as Hugging Face writes it; config_text replaces config.json's
    text, header_edit(header text) the safetensors header's, index: model.safetensors.index.json and
    two shards"""
    r = np.random.default_rng(5)
    d, ff, V, L = 16, 32, 64, 1
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "intermediate_size": ff,
           "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": L, "vocab_size": V,
           "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
           "tie_word_embeddings": False, "hidden_act": "silu"}
    sd = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,), "lm_head.weight": (V, d)}
    for i in range(L):
        p = "model.layers.%d." % i
        sd.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                   p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (d, d),
                   p + "self_attn.v_proj.weight": (d, d), p + "self_attn.o_proj.weight": (d, d),
                   p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                   p + "mlp.down_proj.weight": (d, ff)})
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(config_text if config_text is not None else json.dumps(cfg))
    names = sorted(sd)
    shards = [names[0::2], names[1::2]] if index else [names]
    files = ["model-%05d-of-00002.safetensors" % (i + 1) for i in range(2)] if index else ["model.safetensors"]
    for part, file in zip(shards, files):
        write_safetensors(os.path.join(folder, file),
                          {n: (r.standard_normal(sd[n]) * 0.1).astype("<f4") for n in part}, header_edit)
    if index:
        weight_map = json.dumps({n: files[i] for i in range(2) for n in shards[i]})
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            f.write('{"metadata": {"total_size": 0}, "weight_map": %s, "weight_map": %s}' % (weight_map, weight_map)
                    if index == "duplicate" else '{"metadata": {}, "weight_map": %s}' % weight_map)
    return cfg


def write_safetensors(path, tensors, header_edit=None):
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(tensors[name])), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header)
    if header_edit:
        h = header_edit(h)
    h = h.encode() + b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def import_under_size_limit(e):
    src = e.path("hf")
    hf_llama(src)
    e.must(e.run(["import", src, "-o", e.path("imported")]))
    out = e.path("imported")
    e.refused(e.run(["import", src, "-o", out], limit=4000), "File too large")
    check(not os.path.exists(out), "import left the folder %s" % out)


def run_output_under_size_limit(e):
    out = e.path("out.npy")
    base = ["run", TINY, "--weights", e.tiny_w, "--tokens", "1 2 3, 4 5", "--output", out]
    for engine in ("runtime", "tcc"):
        e.refused(e.run(base + ["--engine", engine], limit=1000), out, "File too large")
        check(not os.path.exists(out), "run --output left %s" % out)


def generate_logits_under_size_limit(e):
    logits = e.path("logits.npy")
    for engine in ("runtime", "tcc"):  # tcc: the packed blob's store fails too (3 MB), and is no error
        p = e.run(["generate", LLAMA, "--weights", e.llama_w, "--tokens", "1 2 3", "--max-new", "4",
                   "--engine", engine, "--logits", logits], limit=2000)
        e.refused(p, logits, "File too large")
        check(not os.path.exists(logits), "generate --logits left %s" % logits)


def cache_files(cache):
    d = os.path.join(cache, "fixformer")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def blob_store_under_size_limit(e):
    """tcc and cc: the blob (449 kB) does not fit, the compiled objects and the output do: exit 0, the
    numbers of a run without the limit, no blob and no temporary in the cache"""
    base = ["run", TINY, "--weights", e.tiny_w, "--tokens", "1 2 3, 4 5"]
    want = e.path("want.npy")
    e.must(e.run(base + ["--output", want, "--engine", "runtime"]))
    full = e.path("cache-full")
    e.must(e.run(base + ["--output", e.path("x.npy"), "--engine", "cc"], cache=full))
    objects = [n for n in cache_files(full) if n.endswith((".so", ".sha256"))]
    so = max(os.path.getsize(os.path.join(full, "fixformer", n)) for n in objects)
    blob = max(os.path.getsize(os.path.join(full, "fixformer", n)) for n in cache_files(full) if n.endswith(".blob"))
    # the limit below, half-way between the largest object (the kernel library's) and the blob, must
    # let the one in and keep the other out by a margin
    check(so < blob * 3 // 4, "the objects (%d bytes) are not well below the blob (%d)" % (so, blob))
    for engine in ("tcc", "cc"):
        cache = e.path("cache-" + engine)
        os.makedirs(os.path.join(cache, "fixformer"), 0o700)
        os.chmod(os.path.join(cache, "fixformer"), 0o700)
        for n in objects:  # the compiled objects already there: only the blob is stored
            shutil.copy(os.path.join(full, "fixformer", n), os.path.join(cache, "fixformer", n))
            os.chmod(os.path.join(cache, "fixformer", n), 0o600)
        out = e.path("out.npy")
        p = e.run(base + ["--output", out, "--engine", engine], limit=(so + blob) // 2, cache=cache,
                  env={"FIXFORMER_PACK_TRACE": "1"})
        check(p.returncode == 0, "%s: exit %d: %s" % (engine, p.returncode, p.stderr.strip()))
        check("not stored" in p.stderr and "File too large" in p.stderr, "%s: trace %r" % (engine, p.stderr))
        check(np.allclose(np.load(out), np.load(want), rtol=1e-4, atol=1e-4), "%s: other numbers" % engine)
        left = [n for n in cache_files(cache) if ".tmp" in n or n.endswith(".blob")]
        check(not left, "%s: left in the cache: %s" % (engine, left))


def cc_object_under_size_limit(e):
    """the cc engine cannot run without its object: one line, exit 1, no temporary in the cache"""
    for limit in (8000, 60000):  # the generated source does not fit; the compiler's own files do not
        cache = e.path("cache-cc-small")
        p = e.run(["run", TINY, "--weights", e.tiny_w, "--tokens", "1 2 3", "--engine", "cc"], limit=limit,
                  cache=cache, env={"CC": e.cc})
        e.refused(p, "cc", "File too large")
        left = [n for n in cache_files(cache) if ".tmp" in n or n.endswith(".so")]
        check(not left, "left in the cache: %s" % left)


def driver_output_under_size_limit(e):
    folder = e.path("driver")
    e.must(e.run(["emit", TINY, "-o", folder, "--weights", e.tiny_w, "--with-main"]))
    exe = os.path.join(folder, "tiny")
    subprocess.run([e.cc, "-std=c99", "-O1", "-o", exe, os.path.join(folder, "tiny.c"),
                    os.path.join(folder, "tiny_main.c"), "-lm"], check=True)
    inp = e.path("in.npy")
    np.save(inp, np.array([[1, 2, 3], [4, 5, 6]], np.int32))
    out = e.path("out.npy")
    args = ["--weights", os.path.join(folder, "tiny.weights"), "--input", inp, "--output", out]
    e.must(e.run(args, binary=exe))
    check(os.path.getsize(out) > 1000, "the driver's output is small")
    os.unlink(out)
    e.refused(e.run(args, limit=1000, binary=exe), out, "File too large")
    check(not os.path.exists(out), "the driver left %s" % out)


def stdout_under_size_limit(e):
    """printed output that does not reach its file (SIGXFSZ ignored by the CLI) is an error, not exit 0"""
    out = e.path("info.txt")
    with open(out, "w") as f:
        p = subprocess.run([e.ff, "info", TINY, "--weights", e.tiny_w], stdout=f, stderr=subprocess.PIPE, text=True,
                           timeout=60, preexec_fn=limited(200), env=dict(os.environ, XDG_CACHE_HOME=e.cache))
    e.refused(p, "standard output", "File too large")


# ---- a key twice in one JSON object --------------------------------------------------------------

def dup_after(text, key, extra):
    """text with extra inserted right after the first "key": value's key (a duplicate ahead of it)"""
    at = text.index('"%s"' % key)
    return text[:at] + extra + ", " + text[at:]


def config_json_duplicate_key(e):
    cfg = hf_llama(e.path("probe"))
    text = json.dumps(cfg).replace('"rope_scaling": null', '"rope_scaling": null, "rope_scaling": '
                                   '{"type": "linear", "factor": 4.0}')
    check(json.loads(text)["rope_scaling"]["factor"] == 4.0, "Python's json takes the last")
    src = e.path("hf-dup-config")
    hf_llama(src, config_text=text)
    out = e.path("imported")
    err = e.refused(e.run(["import", src, "-o", out]), "config.json", '"rope_scaling" appears twice')
    check(not os.path.exists(out), "import left %s: %s" % (out, err))


def index_json_duplicate_key(e):
    src = e.path("hf-dup-index")
    hf_llama(src, index="duplicate")
    out = e.path("imported")
    e.refused(e.run(["import", src, "-o", out]), "model.safetensors.index.json", '"weight_map" appears twice')
    check(not os.path.exists(out), "import left %s" % out)


def safetensors_header_duplicate_key(e):
    # a tensor's dtype twice: cJSON reads F32, Python (serde) refuses or reads the last
    edit = lambda h: h.replace('"dtype": "F32"', '"dtype": "F32", "dtype": "F16"', 1)  # noqa: E731
    src = e.path("hf-dup-header")
    hf_llama(src, header_edit=edit)
    e.refused(e.run(["import", src, "-o", e.path("imported")]), "model.safetensors", '"dtype" appears twice')
    raw = open(e.tiny_w, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n].decode().rstrip(" ")
    for what, h in (("dtype", dup_after(header, "dtype", '"dtype": "F16"')),
                    ("format", '{"__metadata__": {"format": "pt", "format": "np"}, ' + header[1:])):
        h = h.encode() + b" " * (-len(h) % 8)
        w = e.path("dup.safetensors")
        with open(w, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
        for cmd in (["run", TINY, "--weights", w, "--tokens", "1 2"], ["info", TINY, "--weights", w]):
            e.refused(e.run(cmd), "dup.safetensors", '"%s" appears twice' % what)


def tokenizer_json_duplicate_key(e):
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "h": 3, "i": 4, "##i": 5, "hi": 6}
    tok = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": {"type": "BertPreTokenizer"},
           "post_processor": None, "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
           "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                     "max_input_chars_per_word": 100, "vocab": vocab}}
    good = json.dumps(tok)
    cases = [("good", good, None),
             ("model.type twice", dup_after(good, "unk_token", '"type": "BPE"'), '"type" appears twice'),
             ("vocab entry twice", good.replace('"hi": 6', '"hi": 6, "hi": 1'), '"hi" appears twice in object "vocab"'),
             ("vocabulary: unk twice", json.dumps({"tokens": ["<unk>", "h", "i"], "unk": 0}).replace(
                 '"unk": 0', '"unk": 0, "unk": 2'), '"unk" appears twice')]
    for what, text, piece in cases:
        path = e.path("tok.json")
        with open(path, "w") as f:
            f.write(text)
        lua = e.path("tok.lua")
        with open(lua, "w") as f:
            f.write('return { name = "tok", arch = "decoder-only", d_model = 8, heads = 2, d_ff = 16, layers = 1,\n'
                    '  vocab = 64, positional = "rope", max_seq = 16, vocabulary = "%s" }\n' % path)
        w = e.path("tok.safetensors")
        e.must(e.run(["init", lua, "-o", w]))
        p = e.run(["generate", lua, "--weights", w, "--text", "hi", "--engine", "runtime", "--max-new", "2"])
        try:
            if piece:
                e.refused(p, "tok.json", piece)
            else:
                e.must(p)
        except Failure as x:
            raise Failure("%s: %s" % (what, x))


# ---- the packed-weight cache follows the weights' content ----------------------------------------

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/stat.h>
/* a file system that keeps whole seconds: stat's fractions zeroed */
static void coarse(struct stat *st) { st->st_atim.tv_nsec = st->st_mtim.tv_nsec = st->st_ctim.tv_nsec = 0; }
#define WRAP(name, T)                                                         \
  int name(T a, struct stat *st) {                                            \
    static int (*real)(T, struct stat *);                                     \
    if (!real) real = (int (*)(T, struct stat *))dlsym(RTLD_NEXT, #name);     \
    int r = real(a, st);                                                      \
    if (!r) coarse(st);                                                       \
    return r;                                                                 \
  }
WRAP(stat, const char *)
WRAP(lstat, const char *)
WRAP(fstat, int)
"""


SWAP = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* the first open of a cache sidecar (after the weights were hashed, before
 * they are packed): 200 ms later, $SWAP_DST rewritten in place with $SWAP_SRC */
int open(const char *path, int flags, ...) {
  static int (*real)(const char *, int, ...);
  static int done;
  va_list ap;
  va_start(ap, flags);
  int mode = flags & O_CREAT ? va_arg(ap, int) : 0;
  va_end(ap);
  if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
  size_t n = strlen(path);
  const char *src = getenv("SWAP_SRC"), *dst = getenv("SWAP_DST");
  if (!done && src && dst && n > 7 && !strcmp(path + n - 7, ".sha256")) {
    char buf[65536];
    ssize_t r;
    int in = real(src, O_RDONLY), out = real(dst, O_WRONLY);
    done = 1;
    usleep(200000);
    while (in >= 0 && out >= 0 && (r = read(in, buf, sizeof buf)) > 0)
      if (write(out, buf, (size_t)r) != r) break;
    close(in);
    close(out);
  }
  return real(path, flags, mode);
}
"""


def weights_changed_while_packed(e):
    """the file rewritten between its hash and its packing: the blob packed from the new bytes is not
    stored under the old bytes' hash (a later start with the old bytes would map it)"""
    src, lib = e.path("swap.c"), e.path("swap.so")
    with open(src, "w") as f:
        f.write(SWAP)
    subprocess.run([e.cc, "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"], check=True)
    w, other, cache = e.path("w.safetensors"), e.path("other.safetensors"), e.path("cache")
    e.must(e.run(["init", TINY, "-o", w, "--seed", "1"]))
    e.must(e.run(["init", TINY, "-o", other, "--seed", "2"]))
    old = open(w, "rb").read()
    time.sleep(0.3)
    base = ["run", TINY, "--weights", w, "--tokens", "1 2 3", "--engine", "tcc"]
    e.must(e.run(base + ["--output", e.path("x.npy")], cache=cache,
                 env={"LD_PRELOAD": lib, "SWAP_SRC": other, "SWAP_DST": w}))
    check(open(w, "rb").read() == open(other, "rb").read(), "the shim did not rewrite the weights")
    with open(w, "r+b") as f:  # the old bytes again
        f.write(old)
    time.sleep(0.3)
    out, ref = e.path("out.npy"), e.path("ref.npy")
    e.must(e.run(base + ["--output", out], cache=cache))
    e.must(e.run(["run", TINY, "--weights", w, "--tokens", "1 2 3", "--output", ref, "--engine", "runtime"]))
    check(np.allclose(np.load(out), np.load(ref), rtol=1e-4, atol=1e-4), "the output follows the other weights")


def rewrite_same_size(path, seed):
    """the file written in place with other values (a re-init with another seed: same size), its mtime
    put back to the nanosecond"""
    st = os.stat(path)
    other = path + ".other"
    subprocess.run([FF, "init", TINY, "-o", other, "--seed", str(seed)], check=True, capture_output=True)
    data = open(other, "rb").read()
    os.unlink(other)
    check(len(data) == st.st_size, "a re-init changed the size")
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return st


def blob_follows_rewrite(e, env, what):
    """init; run tcc twice (the second start remembers the weights' hash by the file's identity); rewrite
    the file in the same second; run again: the numbers of the runtime on the new weights.  Retried
    when the rewrite did not land in the first write's second."""
    for attempt in range(4):
        w = e.path("w.safetensors")
        cache = e.path("cache")
        time.sleep(1.02 - time.time() % 1)  # early in a second, then past the 100 ms fixformer trusts
        e.must(e.run(["init", TINY, "-o", w, "--seed", "1"]))
        time.sleep(max(0.0, 0.15 - time.time() % 1))
        base = ["run", TINY, "--weights", w, "--tokens", "1 2 3", "--engine", "tcc"]
        for i in range(2):
            e.must(e.run(base + ["--output", e.path("old.npy")], cache=cache, env=env))
        before = rewrite_same_size(w, 2)
        same_second = os.stat(w).st_ctime_ns // 10**9 == before.st_ctime_ns // 10**9
        new, ref = e.path("new.npy"), e.path("ref.npy")
        e.must(e.run(base + ["--output", new], cache=cache, env=env))
        e.must(e.run(["run", TINY, "--weights", w, "--tokens", "1 2 3", "--output", ref, "--engine", "runtime"]))
        check(np.allclose(np.load(new), np.load(ref), rtol=1e-4, atol=1e-4),
              "%s: the output follows the old weights (attempt %d)" % (what, attempt))
        if same_second:
            return
    print("  (%s: the rewrite never landed in the same second; checked across seconds only)" % what)


def weights_rewritten_same_second(e):
    blob_follows_rewrite(e, {}, "this file system")


def weights_rewritten_on_whole_second_fs(e):
    src, lib = e.path("coarse.c"), e.path("coarse.so")
    with open(src, "w") as f:
        f.write(SHIM)
    subprocess.run([e.cc, "-shared", "-fPIC", "-O1", "-o", lib, src, "-ldl"], check=True)
    blob_follows_rewrite(e, {"LD_PRELOAD": lib}, "whole seconds")


CASES = [init_under_size_limit, emit_under_size_limit, import_under_size_limit, run_output_under_size_limit,
         generate_logits_under_size_limit, blob_store_under_size_limit, cc_object_under_size_limit,
         driver_output_under_size_limit, stdout_under_size_limit, config_json_duplicate_key, index_json_duplicate_key,
         safetensors_header_duplicate_key, tokenizer_json_duplicate_key, weights_rewritten_same_second,
         weights_rewritten_on_whole_second_fs, weights_changed_while_packed]
FF = None


def main():
    global FF, failures, passed
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--only", help="run the cases whose names contain this")
    a = ap.parse_args()
    FF = os.path.abspath(a.fixformer)
    with tempfile.TemporaryDirectory() as tmp:
        e = Env(FF, a.cc, tmp)
        for case in CASES:
            if a.only and a.only not in case.__name__:
                continue
            try:
                case(e)
                passed += 1
                print("%-40s ok" % case.__name__)
            except (Failure, subprocess.SubprocessError) as x:
                failures += 1
                print("%-40s FAIL %s" % (case.__name__, x))
    print("%d passed, %d failed" % (passed, failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
