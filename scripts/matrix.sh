#!/usr/bin/env bash
# Joins the conformance columns every runner wrote to target/matrix/<runner>.tsv (lines of
# "case<TAB>sqlite|postgresql|mariadb<TAB>PASS|FAIL|SKIP") into one table: a row per case, a column per
# runner and database. Exits 1 when a cell is not PASS, a runner lacks a case another one has,
# or a runner named in OJS_MATRIX_RUNNERS (space-separated) wrote nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/matrix
shopt -s nullglob
files=("$dir"/*.tsv)
[ ${#files[@]} -gt 0 ] || { echo "matrix: no runner wrote $dir/*.tsv" >&2; exit 1; }
for runner in ${OJS_MATRIX_RUNNERS:-}; do
  [ -s "$dir/$runner.tsv" ] || { echo "matrix: $runner wrote no column ($dir/$runner.tsv)" >&2; exit 1; }
done
python3 - "${files[@]}" <<'PY'
import os, sys
columns, cells, cases = [], {}, []
for path in sys.argv[1:]:
    runner = os.path.basename(path)[:-len(".tsv")]
    for line in open(path):
        case, database, outcome = line.rstrip("\n").split("\t")
        column = f"{runner}/{'pg' if database == 'postgresql' else database}"
        if column not in columns:
            columns.append(column)
        if case not in cases:
            cases.append(case)
        cells[case, column] = outcome
width = max(len(c) for c in cases)
print(f"{'case':{width}}  " + "  ".join(columns))
bad = 0
for case in cases:
    row = []
    for column in columns:
        outcome = cells.get((case, column), "MISSING")
        bad += outcome != "PASS"
        row.append(f"{outcome:{len(column)}}")
    print(f"{case:{width}}  " + "  ".join(row))
total = len(cases) * len(columns)
print(f"conformance: {len(cases)} cases x {len(columns)} columns (runner/database)")
print(f"matrix: {total - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
PY
