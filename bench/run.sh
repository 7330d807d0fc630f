#!/usr/bin/env bash
# The benchmarks (`make bench`). Creates bench/.peer-venv on first use.
#   bench/run.sh                 both, with their defaults
#   bench/run.sh runtime [ARGS]  W1, ours against the peer zett-agent (bench/runtime_overhead.py)
#   bench/run.sh streaming [ARGS] WebSocket streaming and capacity (bench/streaming.py)
#   bench/run.sh capacity [ARGS]  N concurrent three-turn runs on one Daphne (bench/capacity.py)
set -euo pipefail

bench="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$bench")"
cd "$root"

python="$root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
    echo "bench/run.sh: $python is missing; create the project virtualenv first" >&2
    exit 1
fi

peer="$bench/.peer-venv"
peer_python="$peer/bin/python"
wanted="$(grep -E '^zett-agent==' "$bench/requirements-peer.txt" | cut -d= -f3)"
if [[ ! -x "$peer_python" ]] \
    || [[ "$("$peer_python" -c 'from importlib.metadata import version; print(version("zett-agent"))' 2>/dev/null)" != "$wanted" ]]; then
    echo "bench/run.sh: setting up $peer with zett-agent==$wanted" >&2
    rm -rf "$peer"
    python3.11 -m venv "$peer"
    "$peer/bin/pip" install --quiet --disable-pip-version-check -r "$bench/requirements-peer.txt"
fi

which="${1:-all}"
[[ $# -gt 0 ]] && shift
case "$which" in
    runtime) exec "$python" "$bench/runtime_overhead.py" "$@" ;;
    streaming) exec "$python" "$bench/streaming.py" "$@" ;;
    capacity) exec "$python" "$bench/capacity.py" "$@" ;;
    all)
        status=0
        "$python" "$bench/runtime_overhead.py" --json || status=1
        "$python" "$bench/streaming.py" --redis --json "$bench/results/streaming.json" || status=1
        "$python" "$bench/capacity.py" --find-max --json "$bench/results/capacity.json" || status=1
        [[ $status -eq 0 ]] || echo "bench/run.sh: some targets were missed (see above)" >&2
        exit $status
        ;;
    *) echo "usage: bench/run.sh [runtime|streaming|capacity|all] [ARGS...]" >&2; exit 2 ;;
esac
