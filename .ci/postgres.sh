#!/usr/bin/env bash
# PostgreSQL 15 (Debian) for the service's tests: the cluster started, a role and an empty
# database made once. Tests find it at $QASHIFT_TEST_PG, by default
# postgresql+psycopg://qashift:qashift@127.0.0.1/qashift_test. Run as root (install.sh does).
set -euo pipefail
if ! command -v pg_ctlcluster >/dev/null; then
  apt-get install -y -q postgresql >/dev/null || \
    { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
fi
version=$(pg_lsclusters --no-header | awk 'NR==1 {print $1}')
cluster=$(pg_lsclusters --no-header | awk 'NR==1 {print $2}')
if ! pg_lsclusters --no-header | awk 'NR==1 {print $4}' | grep -q online; then
  pg_ctlcluster "$version" "$cluster" start
fi
for _ in $(seq 30); do su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1 && break; sleep 1; done
su postgres -c "psql -qtAc \"select 1 from pg_roles where rolname = 'qashift'\"" | grep -q 1 || \
  su postgres -c "psql -qc \"create user qashift password 'qashift' createdb\""
# a test's database is dropped WITH (FORCE), which must end every backend on it, an
# autovacuum worker's too: that takes pg_signal_backend
su postgres -c "psql -qc 'grant pg_signal_backend to qashift'"
su postgres -c "psql -qtAc \"select 1 from pg_database where datname = 'qashift_test'\"" | grep -q 1 || \
  su postgres -c "psql -qc 'create database qashift_test owner qashift'"
echo "postgres.sh: PostgreSQL $version/$cluster up: postgresql+psycopg://qashift:qashift@127.0.0.1/qashift_test"
