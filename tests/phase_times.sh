#!/usr/bin/env bash
# Times the phases of `make test` and .ci/run, and prints them as a table.
#
#   tests/phase_times.sh FILE NAME COMMAND [ARG...]
#       runs COMMAND and appends "NAME SECONDS ok|failed" to FILE; when
#       COMMAND fails, prints the table so far and exits with its status.
#   tests/phase_times.sh FILE --table
#       prints FILE as a table, one phase a line, and the total.
set -u

file=$1
shift

table() {
  [ -f "$file" ] || return 0
  awk '
    { t[NR] = $2; total += $2
      printf "phase  %-11s %7.0f s %6.1f min  %s\n", $1, $2, $2 / 60, $3 }
    END { printf "phase  %-11s %7.0f s %6.1f min\n", "total", total, total / 60 }
  ' "$file"
}

if [ "$1" = --table ]; then
  echo "--- phase times (wall clock) ---"
  table
  exit 0
fi

name=$1
shift
start=$(date +%s.%N)
"$@"
rc=$?
end=$(date +%s.%N)
seconds=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
mkdir -p "$(dirname "$file")"
if [ "$rc" -eq 0 ]; then
  echo "$name $seconds ok" >> "$file"
else
  echo "$name $seconds failed($rc)" >> "$file"
  echo "--- phase times (wall clock), up to the failed phase $name ---"
  table
fi
exit "$rc"
