# Shared by the tests/cli/test-*.sh scripts, which source it from their own
# directory (ctest runs them as `bash tests/cli/test-X.sh ZOFFLOAD_BINARY
# REPO_DIR`): a private temp directory removed at exit, the pass/fail
# counters and the checks that count into them. A script sets bin (the
# zoffload binary) before calling expect. Defines functions only; running it
# does nothing.

# cli_init TAG: $tmp, a new /tmp/zo-TAG-XXXXXX removed at exit (a script with
# more to clean up sets its own trap after this), and pass=fail=0.
cli_init() {
  tmp=$(mktemp -d "/tmp/zo-$1-XXXXXX") || exit 1
  trap 'rm -rf "$tmp"' EXIT
  pass=0
  fail=0
}

# cli_prepare_text [REPEATS]: $tmp/text.txt, "the quick brown fox jumps over
# the lazy dog. " REPEATS times (300), prepared by zoffload into the byte
# tokens $tmp/train.bin and $tmp/val.bin (10%); exits 1 when prepare fails.
cli_prepare_text() {
  printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 "${1:-300}") >"$tmp/text.txt"
  "$bin" prepare --out-train "$tmp/train.bin" --out-val "$tmp/val.bin" --val-fraction 0.1 "$tmp/text.txt" \
    >/dev/null || exit 1
}

ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*"
  fail=$((fail + 1))
}

# check NAME CONDITION-TEXT: counts a shell test's result (CONDITION-TEXT is
# eval'ed).
check() {
  if eval "$2"; then ok; else bad "$1: $2"; fi
}

# expect CODE SUBSTRING [NAME] -- ARGS...: runs zoffload ARGS and checks its
# exit code and that its output (stdout and stderr) holds SUBSTRING. With
# NAME the output stays in $tmp/NAME.out for later checks.
expect() {
  local code=$1 want=$2 name="" out rc
  if [[ $3 == -- ]]; then
    shift 3
  else
    name=$3
    shift 4
  fi
  if [[ -n $name ]]; then
    "$bin" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    out=$(cat "$tmp/$name.out")
  else
    out=$("$bin" "$@" 2>&1)
    rc=$?
  fi
  if [[ $rc -ne $code || "$out" != *"$want"* ]]; then
    bad "${name:+$name: }zoffload $* -> exit $rc (want $code), output:"
    echo "$out" | tail -8
    echo "  (wanted substring: $want)"
  else
    ok
  fi
}

# cli_report [NAME]: prints "[NAME: ]P passed, F failed"; returns 0 when
# nothing failed (a script ends with it).
cli_report() {
  echo "${1:+$1: }$pass passed, $fail failed"
  [[ $fail -eq 0 ]]
}
