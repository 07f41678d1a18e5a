#!/usr/bin/env bash
# Install check: `pip install .` (a wheel, not editable) into a fresh virtual environment, then
# every command from a directory outside the repository, on copies of the example files, so
# that nothing is read from the checkout: the catalog and the measured runs must come from
# the installed package.  Each command must exit 0 and print what it is expected to print.
#
# Usage: .ci/install_check.sh   (PYTHON=python3.11 by default; KEEP=1 keeps the temp dir)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
WORK="$(mktemp -d)"
if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; fi
VENV="$WORK/venv"
RUN="$WORK/run"
mkdir -p "$RUN"

# The example files the commands run on (copied: the commands never see the repository).
cp "$REPO/experiments/configs/gpt3-175b-a100.toml" "$RUN/run.toml"
cp "$REPO/experiments/problems/llama3-8b-64xh100-step.toml" "$RUN/problem.toml"  # 1,152 points
cp "$REPO/experiments/configs/llama3-70b-h100-gb200-sites.toml" "$RUN/sites.toml"
# The packaged Megatron-Bridge rows of Llama 3 8B (12 rows, both containers, four systems):
# a data file of the user's own, validated in about a minute (the whole file takes about four).
"$PYTHON" - "$REPO/codesign/data/measured_runs_megatron_bridge_2025.json" "$RUN/rows.json" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if "_LLAMA3_8B_" in r["id"]]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
PY

# The commands and the words their output must contain.  The validate line is kept short
# (12 rows, one random split, 50 Adam steps): it checks that the command and a data file
# work, not the calibration itself.
CHECKS=(
  "--help|evaluate|sweep|optimize|sites|validate"
  "presets accelerators|h100-sxm5-80gb"
  "evaluate run.toml --set strategy.microbatch=2|step time|memory/accelerator|capex|microbatch=2"
  "sites sites.toml --balance|balance loss|balanced over"
  "sweep problem.toml --no-progress|exact optimum of the grid|exact evaluations  1,152"
  "optimize problem.toml --no-progress --steps 30 --starts 4 --method relaxed|relaxed objective|exact evaluations"
  "validate --no-report --random-splits 1 --steps 50 --data rows.json|MAPE|Held-out"
)

t0=$SECONDS
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "$REPO"
echo "install: pip install $REPO into a fresh venv: $((SECONDS - t0)) s"

cd "$RUN"
unset PYTHONPATH
export CODESIGN_CACHE_DIR="$WORK/jax-cache"  # not the user's ~/.cache
# The package imported is the installed one, with the version of codesign/_version.py.
want_version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$REPO/codesign/_version.py")"
where="$("$VENV/bin/python" -c 'import codesign; print(codesign.__file__)')"
version="$("$VENV/bin/python" -c 'import codesign; print(codesign.__version__)')"
if [[ "$where" != "$VENV"/* || "$version" != "$want_version" ]]; then
  echo "FAIL: imported codesign $version from $where (want $want_version from $VENV)" >&2
  exit 1
fi
echo "installed: codesign $version at $where"

# The checks run JOBS at a time (default 2, this machine's cores: most of each is one thread
# compiling), longest first; each prints its line in order once all are done.
check() {  # check INDEX: run CHECKS[INDEX], write its result line to result_INDEX.txt
  local i=$1 t=$SECONDS rc word
  local -a parts args missing=()
  IFS='|' read -r -a parts <<<"${CHECKS[$i]}"
  read -r -a args <<<"${parts[0]}"
  if "$VENV/bin/codesign" "${args[@]}" >"out_$i.txt" 2>"err_$i.txt"; then rc=0; else rc=$?; fi
  for word in "${parts[@]:1}"; do
    grep -qF -- "$word" "out_$i.txt" || missing+=("$word")
  done
  if [[ $rc -eq 0 && ${#missing[@]} -eq 0 ]]; then
    echo "ok    codesign ${parts[0]}  ($((SECONDS - t)) s)" >"result_$i.txt"
  else
    echo "FAIL  codesign ${parts[0]}  (exit $rc; missing from the output: ${missing[*]:-none})" \
      >"result_$i.txt"
  fi
}
JOBS="${JOBS:-2}"
for ((i = ${#CHECKS[@]} - 1; i >= 0; i--)); do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  check "$i" &
done
wait
status=0
for i in "${!CHECKS[@]}"; do
  if [[ "$(cat "result_$i.txt")" == ok* ]]; then
    cat "result_$i.txt"
  else
    status=1
    cat "result_$i.txt" >&2
    tail -n 20 "out_$i.txt" "err_$i.txt" >&2
  fi
done
echo "install check: $((SECONDS - t0)) s in all"
exit $status
