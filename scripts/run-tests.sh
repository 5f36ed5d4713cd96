#!/usr/bin/env bash
# Runs the named test stages (default: all of them) and reports each one.
# Starts the lab when a stage needs it and stops it afterwards, even when a stage fails,
# but only if this run started it: a lab a developer brought up by hand stays up.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

ALL_STAGES=(unit integration sanity lint build molecule)
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=("${ALL_STAGES[@]}")

PY=.venv/bin/python
LABCTL=(env -u PYTHONPATH "$PY" lab/labctl.py)
started_lab=no

needs_lab() {
  local stage
  for stage in "${STAGES[@]}"; do
    case "$stage" in integration | molecule) return 0 ;; esac
  done
  return 1
}

start_lab() {
  if "${LABCTL[@]}" status >/dev/null 2>&1; then
    echo "== lab already up; it stays up after the tests"
    return 0
  fi
  echo "== starting the lab"
  started_lab=yes
  "${LABCTL[@]}" start
}

stop_lab() {
  if [ "$started_lab" = yes ]; then
    echo "== stopping the lab"
    "${LABCTL[@]}" stop || echo "!! the lab did not stop cleanly" >&2
  fi
}
trap stop_lab EXIT

run_stage() {
  case "$1" in
    unit)        .venv/bin/pytest -q tests/unit ;;
    integration) .venv/bin/pytest -q tests/integration ;;
    sanity)      scripts/sanity.sh ;;
    lint)        scripts/lint.sh ;;
    build)       scripts/build-check.sh ;;
    molecule)    scripts/molecule.sh ;;
    *) echo "unknown stage '$1' (stages: ${ALL_STAGES[*]})" >&2; return 2 ;;
  esac
}

scripts/link-collection.sh >/dev/null
lab_ok=yes
if needs_lab && ! start_lab; then
  lab_ok=no
fi

passed=0 failed=0 report=()
for stage in "${STAGES[@]}"; do
  echo "== stage: $stage"
  begin=$SECONDS
  if [[ "$stage" =~ ^(integration|molecule)$ ]] && [ "$lab_ok" = no ]; then
    result=FAILED; echo "!! the lab did not start: $stage not run" >&2
  elif run_stage "$stage"; then
    result=passed
  else
    result=FAILED
  fi
  report+=("$(printf '%-12s %-7s %4ss' "$stage" "$result" $((SECONDS - begin)))")
  if [ "$result" = passed ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

echo
echo "== summary"
printf '  %s\n' "${report[@]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
