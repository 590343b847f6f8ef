#!/bin/bash
# cpu.sh PID...: per-thread CPU (utime stime ticks) of the processes and their children
all=""
for p in "$@"; do all="$all $p $(pgrep -P $p)"; done
for p in $all; do
  args=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-80)
  for t in /proc/$p/task/*; do
    s=$(cat $t/stat 2>/dev/null) || continue
    comm=$(echo "$s" | sed 's/^[0-9]* (\(.*\)) .*/\1/' | tr ' ' _)
    rest=$(echo "$s" | sed 's/^.*) //')
    set -- $rest
    echo "$p ${t##*/} $comm ${12} ${13} | $args"
  done
done
