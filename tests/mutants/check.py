"""The verdict of a cargo-mutants run (tests/run-all.sh --step mutants).

Usage: check.py MUTANTS_OUT EQUIVALENT_TXT

Fails when a mutant was missed that EQUIVALENT_TXT does not list, and when a listed mutant was
caught (a test tells it apart, so it is not equivalent). Mutants are matched by file and
description, without line and column: lines shift as the code changes. A description listed
N times covers N missed mutants of that file with that description.

EQUIVALENT_TXT holds one mutant a line, `FILE: DESCRIPTION  # REASON`, as cargo-mutants writes
it in missed.txt less the `:LINE:COLUMN`; lines starting with `#` are comments.
"""

import collections
import re
import sys


def key(line):
    """`dlpack-rs/src/safe/borrow/mod.rs:94:27: replace == with != in Registry::with` without the
    line and column."""
    m = re.match(r"^(.*?):\d+:\d+: (.*)$", line.strip())
    return "%s: %s" % m.groups() if m else line.strip()


def outcomes(out, name):
    try:
        with open("%s/%s" % (out, name), encoding="utf-8") as f:
            return collections.Counter(key(l) for l in f if l.strip())
    except FileNotFoundError:
        return collections.Counter()


def listed(path):
    entries = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            mutant, sep, reason = line.partition("  # ")
            if not sep or not reason.strip():
                sys.exit("%s:%d: no reason given (`FILE: DESCRIPTION  # REASON`)" % (path, n))
            entries[mutant.strip()] += 1
    return entries


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, path = sys.argv[1], sys.argv[2]
    equivalent = listed(path)
    missed, caught = outcomes(out, "missed.txt"), outcomes(out, "caught.txt")
    timeouts, unviable = outcomes(out, "timeout.txt"), outcomes(out, "unviable.txt")
    print(
        "mutants: %d caught, %d missed (%d listed as equivalent), %d timed out (a hang: caught),"
        " %d unviable"
        % (
            sum(caught.values()),
            sum(missed.values()),
            sum((missed & equivalent).values()),
            sum(timeouts.values()),
            sum(unviable.values()),
        ),
        flush=True,
    )
    bad = False
    unexplained = missed - equivalent
    if unexplained:
        bad = True
        print(
            "missed mutants: no test notices these changes. Add a test that does, or (only if the"
            " change cannot alter behaviour) list it in %s with the reason:" % path,
            file=sys.stderr,
        )
        for k in sorted(unexplained.elements()):
            print("  " + k, file=sys.stderr)
    # Listed more often than missed, and caught: a test tells one of them apart. (Listed and
    # neither missed nor caught: a file this run did not mutate, or code that changed.)
    wrong = collections.Counter(
        {k: n - missed[k] for k, n in equivalent.items() if n > missed[k] and caught[k]}
    )
    if wrong:
        bad = True
        print(
            "listed as equivalent but caught by a test, so not equivalent: remove from %s:" % path,
            file=sys.stderr,
        )
        for k in sorted(wrong.elements()):
            print("  " + k, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
