#!/usr/bin/env bash
# Run a command again whenever it dies, so one SIGKILLed daphne of `make cluster`
# comes back on its port instead of honcho stopping the whole cluster (honcho stops
# every process once one exits). SIGTERM/SIGINT stop the command and this loop.
set -u
child=""
stop() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child"
  exit 0
}
trap stop TERM INT
while true; do
  "$@" &
  child=$!
  wait "$child"
  echo "supervise: '$*' exited with $?; starting it again in 1 s" >&2
  sleep 1
done
