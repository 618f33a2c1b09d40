#!/usr/bin/python3
"""The limits around a description and the files it names (issue 10, items 5,
11, 17 and the generator's time limit).  Each bad case must exit with a status
in 1..125 within 20 s (a hang is a failure), print exactly one line on stderr
containing the expected pieces, and leave no output behind:

  - sandbox bombs: library calls whose one C loop an argument sets
    (string.rep("", 1 << 62), table.move over 2^40 slots), library calls and
    VM steps that are slow on big strings or tables, in loops that the
    instruction budget alone does not see;
  - the generator's wall-clock limit (FIXFORMER_GENERATE_SECONDS);
  - vocabularies with special ids out of int range, fractional, negative or
    infinite, non-string tokens, tokens with NUL or control characters (but tab, newline, CR).

Also: the sandboxed library functions still do what Lua's do, and a path
longer than 1023 bytes loads the file it names (not a cut-short one), while one
longer than the 4095 bytes of FF_PATH_MAX is an error naming the key.

  sandbox.py --fixformer BIN
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = 'name = "m", arch = "encoder", d_model = 16, heads = 2, d_ff = 24, layers = 1, vocab = 10, max_seq = 8'
GOOD = "return { %s }\n" % MODEL

# name -> (Lua run before the description returns, pieces of the message)
BOMBS = [
    ("string.rep of ''", 'local s = string.rep("", 1 << 62)', ["string.rep", "4611686018427387904"]),
    ("string.rep method", 'local s = ("x"):rep(1 << 62)', ["string.rep", "memory"]),
    ("string.rep with sep", 'local s = string.rep("", 1 << 40, "")', ["string.rep"]),
    ("table.move 2^40", "local t = table.move({}, 1, 1 << 40, 2)", ["table.move"]),
    ("table.move from minint", "local t = table.move({}, math.mininteger, -1, 1)", ["table.move"]),
    # slow steps in loops: billed to the budget, or stopped by the clock
    ("tonumber of 5 MB", 'local s = string.rep("1", 5000000)\nfor i = 1, 100000 do local x = tonumber(s) end',
     ["the description ran"]),
    ("compare 10 MB strings", 'local s = string.rep("1", 10000000) local u = string.rep("1", 10000000)\n'
     "for i = 1, 1000000 do local x = s < u end", ["the description ran longer than"]),
    ("utf8.codes scan", 'local s = string.rep("\\x80", 10000000) local f = utf8.codes(s)\n'
     "for i = 1, 100000 do f(s, 0) end", ["the description ran"]),
    ("table.unpack 1e6", "local t = {} for i = 1, 900000 do t[i] = i end\n"
     "for i = 1, 100000 do local n = select('#', table.unpack(t)) end", ["the description ran"]),
    ("table.insert at 1", "local t = {} for i = 1, 1000000 do t[i] = i end\n"
     "for i = 1, 100000 do table.insert(t, 1, i) end", ["the description ran"]),
    ("table.concat 2 MB", 'local t = {} for i = 1, 1000000 do t[i] = "ab" end\n'
     "for i = 1, 100000 do local s = table.concat(t) end", ["the description ran"]),
    ("table.sort 1e6", "local t = {} for i = 1, 1000000 do t[i] = -i end\n"
     "for i = 1, 1000 do table.sort(t) end", ["the description ran"]),
    ("string.upper 15 MB", 'local s = string.rep("x", 15000000)\nfor i = 1, 100000 do local u = s:upper() end',
     ["the description ran"]),
]

# what the wrappers must leave as Lua has it
WORKS = r"""
assert(string.rep("ab", 3, ",") == "ab,ab,ab" and string.rep("x", 0) == "" and string.rep("", 5) == "")
assert(("x"):rep(3) == "xxx" and ("abc"):upper() == "ABC" and ("abc"):sub(2) == "bc")
local t = table.move({1, 2, 3}, 1, 3, 2)
assert(t[1] == 1 and t[2] == 1 and t[4] == 3 and table.move({}, 5, 1, 1)[1] == nil)
assert(table.concat({"a", "b", 1}, "-") == "a-b-1" and select("#", table.unpack({1, 2, 3})) == 3)
local s = {3, 1, 2} table.sort(s) assert(s[1] == 1 and s[3] == 3)
table.insert(s, 1, 0) assert(table.remove(s) == 3 and #s == 3 and table.pack(1, 2).n == 2)
assert(utf8.char(72, 228) == "H\u{e4}" and utf8.len("H\u{e4}") == 2 and tonumber("0x10") == 16)
assert(string.format("%5.2f|%q", math.pi, "a") == " 3.14|\"a\"" and tostring(12) == "12")
assert(string.byte("AB", 1, 2) == 65 and string.char(65, 66) == "AB" and math.max(1, 5, 2) == 5)
"""


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


def run(ff, argv, env=None, cwd=None):
    try:
        p = subprocess.run([ff] + argv, capture_output=True, text=True, timeout=20, env=env, cwd=cwd)
        return p.returncode, p.stdout, p.stderr.strip()
    except subprocess.TimeoutExpired:
        return None, "", "timed out"


def check_fails(name, result, pieces, leftover=None):
    code, out, err = result
    problems = []
    if code is None or not 1 <= code <= 125:
        problems.append("exit status %s" % code)
    if not err or len(err.splitlines()) != 1:
        problems.append("stderr is not one line: %r" % err[:300])
    problems += ["message lacks %r" % piece for piece in pieces if piece not in err]
    if out.strip():
        problems.append("printed %r" % out[:100])
    if leftover and os.path.exists(leftover) and (not os.path.isdir(leftover) or os.listdir(leftover)):
        problems.append("left %s behind" % leftover)
    print("%-28s %s  [%s]" % (name, "ok" if not problems else "FAIL: " + "; ".join(problems), err[:150]))
    return bool(problems)


def check(name, ok, detail=""):
    print("%-28s %s" % (name, "ok" if ok else "FAIL: " + detail))
    return not ok


def bombs(ff, tmp):
    failures = 0
    for i, (name, lua, pieces) in enumerate(BOMBS):
        path = write(os.path.join(tmp, "s%d.lua" % i), "%s\nreturn { %s }\n" % (lua, MODEL))
        failures += check_fails(name, run(ff, ["info", path]), ["s%d.lua" % i] + pieces)
    code, out, err = run(ff, ["info", write(os.path.join(tmp, "works.lua"), WORKS + GOOD)])
    failures += check("library still works", code == 0 and 'name = "m"' in out, err)
    return failures


def generator_limit(ff, tmp):
    failures = 0
    env = dict(os.environ, FIXFORMER_GENERATE_SECONDS="0.000001")
    out = os.path.join(tmp, "emitted")
    model = os.path.join(ROOT, "models", "tiny.lua")
    failures += check_fails("generation time limit", run(ff, ["emit", model, "-o", out], env=env),
                            ["code generation took longer than 1e-06 s"], leftover=out)
    env["FIXFORMER_GENERATE_SECONDS"] = "soon"
    failures += check_fails("bad generation limit", run(ff, ["emit", model, "-o", out], env=env),
                            ["FIXFORMER_GENERATE_SECONDS", "'soon'"], leftover=out)
    env["FIXFORMER_GENERATE_SECONDS"] = "60"
    code, _, err = run(ff, ["emit", model, "-o", out], env=env)
    failures += check("generation within its limit", code == 0 and os.path.exists(os.path.join(out, "tiny.c")), err)
    return failures


def long_paths(ff, tmp):
    """A folder chain whose path + "/w.safetensors" is over 1023 bytes: the
    old fixed buffer cut it to ".../w.saf", where a decoy waits."""
    failures = 0
    good = write(os.path.join(tmp, "short.lua"), GOOD.replace("max_seq = 8", 'max_seq = 8, weights = "w.safetensors"'))
    weights = os.path.join(tmp, "w.safetensors")
    subprocess.run([ff, "init", good, "-o", weights], check=True)
    raw = open(weights, "rb").read()
    hlen = struct.unpack("<Q", raw[:8])[0]
    decoy = raw[:8 + hlen] + bytes(len(raw) - 8 - hlen)  # the same tensors, all zero
    folder = tmp
    while len(folder) + 1 + len("w.saf") < 1023:  # the old cut falls inside the file name
        folder = os.path.join(folder, "d" * min(200, 1023 - len(folder) - 1 - len("w.saf") - 1))
    os.makedirs(folder)
    assert len(folder) + 1 + len("w.saf") == 1023, len(folder)
    write(os.path.join(folder, "w.safetensors"), raw, "wb")
    write(os.path.join(folder, "w.saf"), decoy, "wb")
    deep = write(os.path.join(folder, "m.lua"), open(good).read())
    code, out, err = run(ff, ["info", deep])
    full = os.path.join(folder, "w.safetensors")
    failures += check("path over 1023 bytes", code == 0 and ('weights = "%s"' % full) in out, err or out[-300:])
    ref = run(ff, ["run", good, "--tokens", "1 2 3"])
    got = run(ff, ["run", deep, "--tokens", "1 2 3"])
    failures += check("... loads that file", ref[0] == 0 and got[:2] == ref[:2], "%s vs %s" % (got, ref))

    # over FF_PATH_MAX (4096 with its NUL): an error naming the key, relative to cwd so open() could take it
    rel = os.path.join(*(["e" * 200] * 20))
    os.makedirs(os.path.join(tmp, rel))
    name = "v" * 200 + ".safetensors"
    lua = write(os.path.join(tmp, rel, "m.lua"), GOOD.replace("max_seq = 8", 'max_seq = 8, weights = "%s"' % name))
    assert len(os.path.join(rel, "m.lua")) < 4095 < len(os.path.join(rel, name))
    failures += check_fails("path over 4095 bytes", run(ff, ["info", os.path.relpath(lua, tmp)], cwd=tmp),
                            ["m.lua: weights: the resolved path is longer than 4095 bytes"])
    lua = write(lua, GOOD.replace("max_seq = 8", 'max_seq = 8, vocabulary = "%s"' % (name + ".json")))
    failures += check_fails("vocabulary path too long", run(ff, ["info", os.path.relpath(lua, tmp)], cwd=tmp),
                            ["m.lua: vocabulary: the resolved path is longer than 4095 bytes"])
    return failures


def vocabularies(ff, tmp):
    """The dates model with a changed vocabulary: each must be refused."""
    failures = 0
    dates = open(os.path.join(ROOT, "models", "dates.lua")).read()
    good = json.load(open(os.path.join(ROOT, "models", "dates.vocab.json")))
    text = json.dumps(good)

    def with_key(key, value):
        v = dict(good)
        v[key] = value
        return json.dumps(v)

    def with_token(value):
        v = dict(good)
        v["tokens"] = list(good["tokens"])
        v["tokens"][19] = value  # "a"
        return json.dumps(v)

    cases = [
        ("bos 1e300", with_key("bos", 1e300), ['"bos"']),
        ("bos -1e300", with_key("bos", -1e300), ['"bos"']),
        ("bos -5", with_key("bos", -5), ['"bos"']),
        ("bos 2.5", with_key("bos", 2.5), ['"bos"']),
        ("eos 2^31", with_key("eos", 2 ** 31), ['"eos"']),
        ("eos -2^31-1", with_key("eos", -2 ** 31 - 1), ['"eos"']),
        ("pad 1e999 (inf)", text.replace('"pad": 0', '"pad": 1e999'), ['"pad"']),
        ("unk as a string", with_key("unk", "3"), ['"unk"']),
        ("unk as true", with_key("unk", True), ['"unk"']),
        ("lowercase as a string", with_key("lowercase", "yes"), ['"lowercase"']),
        ("token a number", with_token(7), ["tokens[19]"]),
        ("token null", with_token(None), ["tokens[19]"]),
        ("token empty", with_token(""), ["tokens[19]"]),
        ("token with \\u0000", with_token("a\u0000b"), ["NUL"]),
        ("token with a raw NUL", with_token("a").replace('"a"', '"a\0b"'), ["NUL"]),
        ("token with a BEL", with_token("a\u0007b"), ["tokens[19]", "control character 0x07"]),
        ("token with ESC", with_token("\u001b[31m"), ["tokens[19]", "control character 0x1b"]),
        ("tokens empty", with_key("tokens", []), ['"tokens"']),
        ("tokens an object", with_key("tokens", {"a": 1}), ['"tokens"']),
        ("not JSON", "{\"tokens\": [", ["not valid JSON"]),
    ]
    for i, (name, body, pieces) in enumerate(cases):
        vocab = write(os.path.join(tmp, "v%d.json" % i), body)
        lua = write(os.path.join(tmp, "vm%d.lua" % i), dates.replace('"dates.safetensors"', json.dumps(
            os.path.join(ROOT, "models", "dates.safetensors"))).replace('"dates.vocab.json"', '"v%d.json"' % i))
        failures += check_fails(name, run(ff, ["generate", lua, "--text", "march 5, 1999", "--engine", "runtime"]),
                                ["v%d.json" % i] + pieces)
    lua = write(os.path.join(tmp, "vok.lua"), dates.replace('"dates.', '"%s/models/dates.' % ROOT))
    code, out, err = run(ff, ["generate", lua, "--text", "march 5, 1999", "--engine", "runtime"])
    failures += check("the shipped vocabulary", code == 0 and out.strip() == "1999-03-05", err)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for part in (bombs, generator_limit, long_paths, vocabularies):
            sub = os.path.join(tmp, part.__name__)
            os.makedirs(sub)
            failures += part(ff, sub)
    print("all limits hold" if not failures else "%d FAILED" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
