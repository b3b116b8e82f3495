#!/bin/sh
# slow: sleeps 1 s, then applies the solution like perfect.
set -eu
sleep 1
exec sh "$(dirname "$0")/perfect.sh"
