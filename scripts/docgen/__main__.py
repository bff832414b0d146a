"""``python -m docgen [--check] [PATH...]``: write every generated file (or those named), or with
--check only compare them with what is checked in and exit 1 naming those that differ."""

from __future__ import annotations

import argparse
import sys

from .deploy_copies import ROOT
from .targets import targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gen-docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is not current")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="only these files (default: all)")
    args = parser.parse_args(argv)
    every = targets()
    unknown = sorted(set(args.paths) - set(every))
    if unknown:
        parser.error(f"not a generated file: {', '.join(unknown)} (known: {', '.join(every)})")
    stale = []
    for path, render in every.items():
        if args.paths and path not in args.paths:
            continue
        target = ROOT / path
        text = render()
        if target.is_file() and target.read_text() == text:
            continue
        if args.check:
            stale.append(path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"gen-docs: wrote {path}")
    if stale:
        print(f"gen-docs: not current (run scripts/gen-docs): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
