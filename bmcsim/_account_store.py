"""The simulated BMC's accounts as data (the AccountService resources and the role checks are in
`_accounts`): below the routing, so the session table and the BMC can hold it."""

from __future__ import annotations

import hmac
import itertools
from dataclasses import dataclass, field


@dataclass(slots=True)
class Account:
    """One BMC account. The password is a secret: never logged, never in a reply."""

    id: str
    username: str
    password: str = field(repr=False)
    role: str
    enabled: bool = True
    revision: int = 0


class AccountStore:
    """The BMC's accounts, by id; account "1" is the configured user and cannot be deleted."""

    def __init__(self, username: str, password: str) -> None:
        self._accounts: dict[str, Account] = {"1": Account("1", username, password, "Administrator")}
        self._ids = itertools.count(2)
        self.revision = 0

    def check(self, username: object, password: object) -> Account | None:
        """The enabled account for a user name and password (constant-time compare), or None."""
        if not isinstance(username, str) or not isinstance(password, str):
            return None
        found = None
        for account in self._accounts.values():
            user_ok = hmac.compare_digest(username.encode(), account.username.encode())
            pass_ok = hmac.compare_digest(password.encode(), account.password.encode())
            if user_ok and pass_ok and account.enabled:
                found = account
        return found

    def by_name(self, username: str) -> Account | None:
        """The account with this user name."""
        return next((a for a in self._accounts.values() if a.username == username), None)

    def get(self, account_id: str) -> Account | None:
        """The account with this id."""
        return self._accounts.get(account_id)

    def ids(self) -> list[str]:
        """Account ids in creation order."""
        return list(self._accounts)

    def add(self, username: str, password: str, role: str) -> Account:
        """Create an account (the caller validated it)."""
        account = Account(str(next(self._ids)), username, password, role)
        self._accounts[account.id] = account
        self.revision += 1
        return account

    def remove(self, account_id: str) -> None:
        """Delete an account."""
        del self._accounts[account_id]
        self.revision += 1
