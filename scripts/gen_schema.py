#!/usr/bin/python3
"""Writes the two files made from include/ff_schema.h, the description's keys
and weight kinds, by `fixformer info --schema`:

  python/fixformer_schema.json     the exporter's schema (`info --schema`)
  docs/model-description.md        its key table (`info --schema --markdown`),
                                   between the table's header and the blank
                                   line after it, under "## Keys"

Run it after changing the table (tests/schema.py fails while either is stale):

  scripts/gen_schema.py [--fixformer build/fixformer] [--check]

--check writes nothing and exits 1 naming the stale files.
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON = os.path.join(ROOT, "python", "fixformer_schema.json")
DOCS = os.path.join(ROOT, "docs", "model-description.md")


def schema(fixformer, *extra):
    return subprocess.run([fixformer, "info", "--schema", *extra], check=True, capture_output=True,
                          text=True).stdout


def docs_with_table(text, table):
    """The docs' text with the key table under "## Keys" replaced by table."""
    lines = text.split("\n")
    keys = lines.index("## Keys")
    first = next(i for i in range(keys, len(lines)) if lines[i].startswith("| key |"))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("|"))
    return "\n".join(lines[:first] + table.rstrip("\n").split("\n") + lines[end:])


def made(fixformer):
    """{path: the text it should have}"""
    with open(DOCS, encoding="utf-8") as f:
        docs = f.read()
    return {JSON: schema(fixformer), DOCS: docs_with_table(docs, schema(fixformer, "--markdown"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", default=os.path.join(ROOT, "build", "fixformer"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = []
    for path, text in made(args.fixformer).items():
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old == text:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not args.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if args.check and stale:
        print("stale (scripts/gen_schema.py rewrites them): %s" % ", ".join(stale))
        return 1
    print("%s: %s" % ("wrote" if stale else "current", ", ".join(stale) or "both"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
