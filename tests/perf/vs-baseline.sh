#!/usr/bin/env bash
# The old name of tests/perf/vs-peers.sh, which measures everything this
# script did (uroce bench beside ../shared/baseline, in one run) and more
# (UCX over TCP, perftest on uroce's library, the raw UDP ping-pong in
# uroce's socket style, the engine). Kept so the dated runs in
# docs/performance.md still name a command that works.
exec "$(dirname "$0")/vs-peers.sh" "$@"
