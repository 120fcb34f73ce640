"""The submission service: accounts and tokens, a jobs table that is the queue, workers that
claim jobs with a lease and run them through the one evaluation entry, and an HTTP API.

One source of truth per job: its row in the jobs table (state, lease, attempts) and its
history; the result itself is the store's cell, which the job names by its key. A broker,
a status file or a second copy of a job's state exists nowhere.

    db        the tables (users, tokens, jobs, job events) and the engine (SQLite, WAL)
    accounts  users and tokens (only their SHA-256 kept)
    queue     submit, claim (atomic, with a lease), renew, finish, cancel: states only forward
    worker    the loop that claims a job and evaluates its cell
    app       the HTTP API (FastAPI), versioned under /v1
    client    what `qashift remote` sends
"""
