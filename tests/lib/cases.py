"""The runner of a script of named cases: `SCRIPT --fixformer BIN [--case NAME]`,
each case a function of a context, reporting one line, the run failing at the end."""
import argparse
import os
import tempfile


def main(name, doc, cases, context):
    """context(fixformer, tmp): what every case takes; exit status 1 if a case failed"""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--case", action="append", help="run only these cases")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        c = context(os.path.abspath(args.fixformer), tmp)
        for case in cases:
            if args.case and case.__name__ not in args.case:
                continue
            try:
                print("%-34s ok: %s" % (case.__name__, case(c)), flush=True)
            except Exception as e:  # noqa: BLE001 - every case reports, the run fails at the end
                failed += 1
                print("%-34s FAIL: %s: %s" % (case.__name__, type(e).__name__, str(e)[:1500]), flush=True)
    print("%s: %s" % (name, "ok" if not failed else "%d FAILED" % failed))
    return 1 if failed else 0
