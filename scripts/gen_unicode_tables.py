#!/usr/bin/python3
"""Writes tokenizers/unicode_tables.h: the Unicode data the tokenizers need
(general categories as ranges, the lowercase map, and what the
NFC/NFD/NFKC/NFKD normalizers and BERT's accent stripping (NFD without the
nonspacing marks) read: full decompositions, combining classes, primary
composites), from Python's unicodedata.  It also checks the
growth bounds tok_encode.c assumes (TOK_GROW_*).
The grapheme cluster break property and Extended_Pictographic (UAX #29's
segmentation, which Hugging Face's Precompiled normalizer works in) come
from the UCD files of Debian's unicode-data package (Python's unicodedata
has neither).
Run: /usr/bin/python3 scripts/gen_unicode_tables.py (apt-get install unicode-data)"""
import os
import sys
import unicodedata as ud

MAX = 0x110000


def ranges(pred):
    out, start = [], None
    for cp in range(MAX):
        if pred(cp):
            if start is None:
                start = cp
        elif start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, MAX - 1))
    return out


def cat(cp):
    return ud.category(chr(cp))


def c_str(s):
    return '"' + "".join("\\x%02x" % b for b in s.encode("utf-8")) + '"'


def emit_ranges(f, name, rs):
    f.write("static const uint32_t %s[][2] = {\n" % name)
    for a, b in rs:
        f.write("  {0x%x, 0x%x},\n" % (a, b))
    f.write("};\n")


def emit_map(f, name, pairs):
    f.write("static const ff_umap %s[] = {\n" % name)
    for cp, s in pairs:
        f.write("  {0x%x, %s},\n" % (cp, c_str(s)))
    f.write("};\n")


def emit_ccc(f, cps):
    """nonzero canonical combining classes as ranges of one class"""
    out = []
    for cp in cps:
        c = ud.combining(chr(cp))
        if c and out and out[-1][1] == cp - 1 and out[-1][2] == c:
            out[-1][1] = cp
        elif c:
            out.append([cp, cp, c])
    f.write("static const uint32_t uc_ccc[][3] = { /* first, last, class */\n")
    for a, b, c in out:
        f.write("  {0x%x, 0x%x, %d},\n" % (a, b, c))
    f.write("};\n")


def compositions(cps):
    """(first, second) -> primary composite: a canonical decomposition of two
    characters that NFC keeps (not excluded), ordered by the pair"""
    out = []
    for cp in cps:
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and ud.normalize("NFC", chr(cp)) == chr(cp):
            out.append((parts[0], parts[1], cp))
    return sorted(out)


def check_growth(cps):
    """the bounds tok_encode.c's scratch assumes: UTF-8 bytes out per byte in"""
    grow = {"NFD": 3, "NFKD": 11, "lower": 1.5}
    for cp in cps:
        c, n = chr(cp), len(chr(cp).encode("utf-8"))
        for form in ("NFD", "NFKD"):
            assert len(ud.normalize(form, c).encode("utf-8")) <= grow[form] * n, (form, hex(cp))
        assert len(c.lower().encode("utf-8")) <= grow["lower"] * n, hex(cp)
        assert len(ud.normalize("NFKD", c)) <= 18, hex(cp)  # TOK_DECOMP_MAX


UCD = "/usr/share/unicode"
# tok_encode.c's TOK_G_*, in this order (LV and LVT, every Hangul syllable, by formula there)
GCB = ["Other", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend", "SpacingMark", "L", "V", "T"]


def ucd_property(path, names):
    """[(first, last, name)] of a UCD file's lines whose property is one of names, merged"""
    out, version = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# Used with Emoji Version "):
                version = "emoji-data.txt, Emoji " + line.split()[5]
            elif version is None and line.startswith("# ") and line.strip().endswith(".txt"):
                version = line.strip()[2:]
            body = line.split("#")[0].strip()
            if not body:
                continue
            cps, prop = [x.strip() for x in body.split(";")]
            if prop not in names:
                continue
            a, _, b = cps.partition("..")
            out.append([int(a, 16), int(b or a, 16), prop])
    out.sort()
    merged = []
    for a, b, p in out:
        if merged and merged[-1][1] == a - 1 and merged[-1][2] == p:
            merged[-1][1] = b
        else:
            merged.append([a, b, p])
    return merged, version


def emit_graphemes(f):
    gcb, v1 = ucd_property(os.path.join(UCD, "auxiliary", "GraphemeBreakProperty.txt"), GCB[1:])
    pict, v2 = ucd_property(os.path.join(UCD, "emoji", "emoji-data.txt"), ["Extended_Pictographic"])
    f.write("/* the grapheme cluster break property but LV and LVT (tok_encode.c's TOK_G_*), from %s */\n" % v1)
    f.write("static const uint32_t uc_gcb[][3] = { /* first, last, class */\n")
    for a, b, p in gcb:
        f.write("  {0x%x, 0x%x, %d},\n" % (a, b, GCB.index(p)))
    f.write("};\n/* Extended_Pictographic, from %s */\n" % v2)
    emit_ranges(f, "uc_extpict", [(a, b) for a, b, _ in pict])


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizers", "unicode_tables.h")
    surrogate = lambda cp: 0xD800 <= cp <= 0xDFFF
    lower, nfd, nfkd = [], [], []
    cps = [cp for cp in range(MAX) if not surrogate(cp)]
    check_growth(cps)
    for cp in range(MAX):
        if surrogate(cp):
            continue
        c = chr(cp)
        if c.lower() != c:
            lower.append((cp, c.lower()))
        if not 0xAC00 <= cp <= 0xD7A3:  # Hangul: by formula
            if ud.normalize("NFD", c) != c:
                nfd.append((cp, ud.normalize("NFD", c)))
            if ud.normalize("NFKD", c) != ud.normalize("NFD", c):
                nfkd.append((cp, ud.normalize("NFKD", c)))
    with open(path, "w") as f:
        f.write("/* unicode_tables.h - generated by scripts/gen_unicode_tables.py from Unicode %s\n"
                " * (Python's unicodedata); do not edit. */\n" % ud.unidata_version)
        emit_ranges(f, "uc_letter", ranges(lambda cp: cat(cp).startswith("L")))
        emit_ranges(f, "uc_number", ranges(lambda cp: cat(cp).startswith("N")))
        emit_ranges(f, "uc_punct", ranges(lambda cp: cat(cp).startswith("P")))
        emit_ranges(f, "uc_other", ranges(lambda cp: cat(cp).startswith("C")))
        emit_ranges(f, "uc_mark_nonspacing", ranges(lambda cp: cat(cp) == "Mn"))
        emit_map(f, "uc_lower_map", lower)
        emit_ranges(f, "uc_mark", ranges(lambda cp: cat(cp).startswith("M")))
        emit_ranges(f, "uc_upper", ranges(lambda cp: cat(cp) in ("Lu", "Lt")))
        emit_ranges(f, "uc_lowercase", ranges(lambda cp: cat(cp) == "Ll"))
        emit_ranges(f, "uc_symbol", ranges(lambda cp: cat(cp).startswith("S")))
        emit_ccc(f, cps)
        emit_map(f, "uc_nfd_map", nfd)
        emit_map(f, "uc_nfkd_map", nfkd)
        f.write("static const uint32_t uc_compose[][3] = { /* first, second -> composite */\n")
        for a, b, c in compositions(cps):
            f.write("  {0x%x, 0x%x, 0x%x},\n" % (a, b, c))
        f.write("};\n")
        emit_graphemes(f)
    print(path)


if __name__ == "__main__":
    sys.exit(main())
