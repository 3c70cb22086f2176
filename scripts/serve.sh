#!/usr/bin/env bash
# Set up (if needed) and start headgate on SQLite at http://127.0.0.1:8080.
# Arguments go to `headgate serve` (e.g. --addr 127.0.0.1:9000).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
# Run from the checkout so the default database (headgate.db) lands here, not in
# whatever directory the script was started from.
cd "$root"
exec .venv/bin/headgate serve "$@"
