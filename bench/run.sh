#!/usr/bin/env bash
# Runtime overhead benchmark W1: ours against the peer zett-agent, in one invocation.
# Creates bench/.peer-venv on first use; arguments go to bench/runtime_overhead.py
# (for example: bench/run.sh --runs 2000 --json).
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

exec "$python" "$bench/runtime_overhead.py" "$@"
