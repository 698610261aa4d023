"""The simulated BMC's AccountService: accounts, the three standard roles, and their enforcement.

Every BMC starts with one Administrator account (the configured user, id "1"); more can be created
through `AccountService/Accounts` (Administrator only). Privileges follow DSP0266's standard roles:

- ReadOnly: Login, ConfigureSelf (read everything, change its own password, log its session out);
- Operator: + ConfigureComponents (PATCH caps, POST actions);
- Administrator: + ConfigureUsers, ConfigureManager (accounts).

A request without the privilege gets 403 `InsufficientPrivilege` with a Redfish error body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bmcsim import _errors, _messages
from bmcsim._account_store import Account
from bmcsim._routing import JsonDict, Reply, Route, SimRequest, collection, link, status_ok

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

SERVICE = "/redfish/v1/AccountService"
ACCOUNTS = f"{SERVICE}/Accounts"
ROLES = f"{SERVICE}/Roles"
MIN_PASSWORD, MAX_PASSWORD = 8, 32
_SESSIONS = "/redfish/v1/SessionService/Sessions"

#: standard role -> its assigned privileges (DSP0266)
ROLE_PRIVILEGES: dict[str, tuple[str, ...]] = {
    "Administrator": ("Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"),
    "Operator": ("Login", "ConfigureSelf", "ConfigureComponents"),
    "ReadOnly": ("Login", "ConfigureSelf"),
}
_WRITABLE = ("UserName", "Password", "RoleId", "Enabled", "Locked")


def authorize(bmc: Bmc, username: str, method: str, path: str) -> None:
    """Raise 403 when the account's role lacks the privilege `method path` needs."""
    if method in ("GET", "HEAD"):
        return
    account = bmc.accounts.by_name(username)
    privileges = ROLE_PRIVILEGES.get(account.role if account else "", ())
    if path.startswith(SERVICE):
        own = account is not None and path == f"{ACCOUNTS}/{account.id}" and method == "PATCH"
        needed = "ConfigureSelf" if own else "ConfigureUsers"
    elif path.startswith(f"{_SESSIONS}/") and method == "DELETE":
        needed = "ConfigureSelf"  # logging a session out
    else:
        needed = "ConfigureComponents"
    if needed not in privileges:
        raise insufficient_privilege()


def insufficient_privilege() -> _errors.RedfishError:
    """403 for an authenticated account whose role lacks the privilege."""
    return _errors.RedfishError(
        403,
        [
            _messages.message(
                _messages.BASE + "InsufficientPrivilege",
                "There are insufficient privileges for the account or credentials associated with the "
                "current session to perform the requested operation.",
                severity="Critical",
                resolution="Either abandon the operation or change the associated access rights and "
                "resubmit the request if the operation failed.",
            )
        ],
    )


def no_operation() -> JsonDict:
    """A PATCH that changes nothing (e.g. only OData annotations)."""
    return _messages.message(
        _messages.BASE + "NoOperation",
        "The request body submitted contain no data to act upon and no changes to the resource took place.",
        resolution="Add properties in the JSON object and resubmit the request.",
    )


# --- resources ---------------------------------------------------------------------------------------------


def _service(bmc: Bmc, req: SimRequest) -> Reply:
    return Reply(
        body={
            "@odata.id": SERVICE,
            "@odata.type": "#AccountService.v1_13_0.AccountService",
            "Id": "AccountService",
            "Name": "Account Service",
            "ServiceEnabled": True,
            "Status": status_ok(),
            "MinPasswordLength": MIN_PASSWORD,
            "MaxPasswordLength": MAX_PASSWORD,
            "Accounts": link(ACCOUNTS),
            "Roles": link(ROLES),
        },
        revision=0,
    )


def _account_doc(account: Account) -> JsonDict:
    return {
        "@odata.id": f"{ACCOUNTS}/{account.id}",
        "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
        "Id": account.id,
        "Name": "User Account",
        "UserName": account.username,
        "Password": None,  # write-only: never shown
        "RoleId": account.role,
        "Enabled": account.enabled,
        "Locked": False,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": link(f"{ROLES}/{account.role}")},
    }


def _accounts(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{ACCOUNTS}/{aid}" for aid in bmc.accounts.ids()]
    body = collection(ACCOUNTS, "#ManagerAccountCollection.ManagerAccountCollection", "Accounts", members)
    return Reply(body=body, revision=bmc.accounts.revision)


def _create(bmc: Bmc, req: SimRequest) -> Reply:
    body = req.body if isinstance(req.body, dict) else None
    if body is None:
        raise _errors.malformed_json()
    missing = [p for p in ("UserName", "Password") if p not in body]
    if missing:
        raise _errors.bad_request([_messages.property_missing(p) for p in missing])
    unknown = [k for k in body if k not in _WRITABLE]
    if unknown:
        raise _errors.bad_request([_messages.property_unknown(k) for k in unknown])
    username, password, role = body["UserName"], body["Password"], body.get("RoleId", "ReadOnly")
    problems = _check_values(bmc, username=username, password=password, role=role)
    if problems:
        raise _errors.bad_request(problems)
    account = bmc.accounts.add(username, password, role)
    location = f"{ACCOUNTS}/{account.id}"
    return Reply(status=201, body=_account_doc(account), headers={"Location": location}, revision=0)


def _check_values(bmc: Bmc, **values: object) -> list[JsonDict]:
    problems = []
    name = values.get("username")
    if "username" in values and (not isinstance(name, str) or not name or bmc.accounts.by_name(name)):
        problems.append(_messages.property_value_incorrect("UserName", name))
    if "password" in values:
        pwd = values["password"]
        if not isinstance(pwd, str) or not MIN_PASSWORD <= len(pwd) <= MAX_PASSWORD:
            problems.append(_messages.property_value_incorrect("Password", "<hidden>"))
    if "role" in values and values["role"] not in ROLE_PRIVILEGES:
        problems.append(_messages.property_value_not_in_list(values["role"], "RoleId"))
    return problems


def _account(bmc: Bmc, req: SimRequest) -> Reply:
    account = bmc.accounts.get(req.params["id"])
    if account is None:
        raise _errors.resource_not_found(req.path)
    return Reply(body=_account_doc(account), revision=account.revision)


def _patch(bmc: Bmc, req: SimRequest) -> Reply:
    account = bmc.accounts.get(req.params["id"])
    if account is None:
        raise _errors.resource_not_found(req.path)
    body = req.body if isinstance(req.body, dict) else None
    if body is None:
        raise _errors.malformed_json()
    changes = {k: v for k, v in body.items() if not k.startswith("@")}
    if not changes:
        raise _errors.bad_request([no_operation()])
    unknown = [k for k in changes if k not in _WRITABLE]
    if unknown:
        raise _errors.bad_request([_messages.property_unknown(k) for k in unknown])
    checks: dict[str, object] = {}
    if "UserName" in changes and changes["UserName"] != account.username:
        checks["username"] = changes["UserName"]
    if "Password" in changes:
        checks["password"] = changes["Password"]
    if "RoleId" in changes:
        checks["role"] = changes["RoleId"]
    problems = _check_values(bmc, **checks)
    if "Enabled" in changes and not isinstance(changes["Enabled"], bool):
        problems.append(_messages.property_value_type_error(changes["Enabled"], "Enabled"))
    if problems:
        raise _errors.bad_request(problems)
    account.username = changes.get("UserName", account.username)
    account.password = changes.get("Password", account.password)
    account.role = changes.get("RoleId", account.role)
    account.enabled = changes.get("Enabled", account.enabled)
    account.revision += 1
    return Reply(body=_account_doc(account), revision=account.revision)


def _delete(bmc: Bmc, req: SimRequest) -> Reply:
    account_id = req.params["id"]
    if bmc.accounts.get(account_id) is None:
        raise _errors.resource_not_found(req.path)
    if account_id == "1":
        raise insufficient_privilege()  # the BMC's own administrator stays
    bmc.accounts.remove(account_id)
    return Reply(status=204)


def _roles(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{ROLES}/{name}" for name in ROLE_PRIVILEGES]
    return Reply(body=collection(ROLES, "#RoleCollection.RoleCollection", "Roles", members), revision=0)


def _role(bmc: Bmc, req: SimRequest) -> Reply:
    name = req.params["id"]
    if name not in ROLE_PRIVILEGES:
        raise _errors.resource_not_found(req.path)
    return Reply(
        body={
            "@odata.id": f"{ROLES}/{name}",
            "@odata.type": "#Role.v1_3_1.Role",
            "Id": name,
            "Name": f"{name} Role",
            "RoleId": name,
            "IsPredefined": True,
            "AssignedPrivileges": list(ROLE_PRIVILEGES[name]),
        },
        revision=0,
    )


def account_routes() -> list[Route]:
    """AccountService routes, served by every model."""
    return [
        Route(SERVICE, get=_service),
        Route(ACCOUNTS, get=_accounts, post=_create),
        Route(f"{ACCOUNTS}/{{id}}", get=_account, patch=_patch, delete=_delete),
        Route(ROLES, get=_roles),
        Route(f"{ROLES}/{{id}}", get=_role),
    ]
