"""Users and their tokens. A token is shown once, when it is made; the database keeps only its
SHA-256, so a copy of the database lets nobody submit."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select

from evaluator.bundles import policy
from evaluator.core.errors import UserError
from evaluator.service.db import tokens, users

SCOPES = ("submit", "admin")
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
PREFIX = "qs_"  # a token says what it is


@dataclass(frozen=True)
class Account:
    user_id: int
    name: str
    scope: str
    tier: str = "default"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(engine: Engine, name: str, tier: str = "default") -> int:
    """A new user of a tier (its limits: the operator's policy, `tiers:`); a one-line error
    for a name taken or not a plain name, or a tier the policy does not name."""
    if not NAME.match(name):
        raise UserError(f"user name {name!r}: lower-case letters, digits, '.', '_' and '-', "
                        f"at most 64")
    known = policy.current().tiers
    if tier not in known:
        raise UserError(f"tier {tier!r}: the operator's policy names {', '.join(sorted(known))}")
    with engine.begin() as conn:
        if conn.execute(select(users.c.id).where(users.c.name == name)).first():
            raise UserError(f"user {name!r} exists already")
        return conn.execute(insert(users).values(name=name, tier=tier,
                                                 created_at=time.time())).inserted_primary_key[0]


def create_token(engine: Engine, name: str, scope: str = "submit") -> str:
    """A new token of user `name`: returned once, kept only as its SHA-256."""
    if scope not in SCOPES:
        raise UserError(f"scope {scope!r}: one of {', '.join(SCOPES)}")
    token = PREFIX + secrets.token_urlsafe(32)
    with engine.begin() as conn:
        row = conn.execute(select(users.c.id).where(users.c.name == name)).first()
        if row is None:
            raise UserError(f"no user {name!r}; add one with `qashift admin user add {name}`")
        conn.execute(insert(tokens).values(sha256=digest(token), user_id=row.id, scope=scope,
                                           created_at=time.time()))
    return token


def account_of(engine: Engine, token: str) -> Account | None:
    """Who a token belongs to, or None."""
    with engine.connect() as conn:
        row = conn.execute(
            select(users.c.id, users.c.name, tokens.c.scope, users.c.tier)
            .join(tokens, tokens.c.user_id == users.c.id)
            .where(tokens.c.sha256 == digest(token))).first()
    return None if row is None else Account(row.id, row.name, row.scope, row.tier)
