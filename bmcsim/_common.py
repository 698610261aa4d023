"""Resources every simulated BMC has: service root, sessions, tasks, managers, collections, firmware."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from bmcsim import _errors, _messages
from bmcsim._accounts import account_routes
from bmcsim._bmcweb import monitor_routes
from bmcsim._protocol import METADATA, metadata
from bmcsim._routing import (
    JsonDict,
    Reply,
    Route,
    SimRequest,
    collection,
    link,
    require_object,
    status_ok,
)
from bmcsim._sessions import Session
from bmcsim._tasks import TASKS_PATH

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

ROOT = "/redfish/v1"
SESSIONS = "/redfish/v1/SessionService/Sessions"
PUBLIC_GET = frozenset({"GET", "HEAD"})


def service_uuid(bmc: Bmc) -> str:
    """A stable UUID per BMC index and model."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"devicectl-bmc-sim/{bmc.platform.name}/{bmc.index}"))


def _redfish(bmc: Bmc, req: SimRequest) -> Reply:
    return Reply(body={"v1": "/redfish/v1/"})


def _root(bmc: Bmc, req: SimRequest) -> Reply:
    platform = bmc.platform
    body: JsonDict = {
        "@odata.id": ROOT,
        "@odata.type": "#ServiceRoot.v1_17_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": service_uuid(bmc),
        "Vendor": platform.vendor,
        "Product": platform.product,
        "ProtocolFeaturesSupported": {
            # no $expand/$select/$filter: clients must walk links, as on most BMCs
            "ExpandQuery": {"ExpandAll": False, "Levels": False, "Links": False, "NoLinks": False},
            "FilterQuery": False,
            "SelectQuery": False,
            "OnlyMemberQuery": False,
            "ExcerptQuery": False,
        },
        "Links": {"Sessions": link(SESSIONS)},
        "SessionService": link(f"{ROOT}/SessionService"),
        "AccountService": link(f"{ROOT}/AccountService"),
        # the schema's name for the TaskService link is `Tasks`
        "Tasks": link(f"{ROOT}/TaskService"),
        "Managers": link(f"{ROOT}/Managers"),
        "Chassis": link(f"{ROOT}/Chassis"),
        "Systems": link(f"{ROOT}/Systems"),
    }
    if platform.firmware_inventory:
        body["UpdateService"] = link(f"{ROOT}/UpdateService")
    return Reply(body=body, revision=0)


def _odata(bmc: Bmc, req: SimRequest) -> Reply:
    names = {n: n for n in ("Systems", "Chassis", "Managers", "SessionService", "AccountService")}
    names["Tasks"] = "TaskService"
    if bmc.platform.firmware_inventory:
        names["UpdateService"] = "UpdateService"
    return Reply(
        body={
            "@odata.context": METADATA,
            "value": [{"name": "Service", "kind": "Singleton", "url": "/redfish/v1/"}]
            + [{"name": n, "kind": "Singleton", "url": f"{ROOT}/{p}"} for n, p in names.items()],
        }
    )


# --- sessions --------------------------------------------------------------------------------------------


def _session_service(bmc: Bmc, req: SimRequest) -> Reply:
    return Reply(
        body={
            "@odata.id": f"{ROOT}/SessionService",
            "@odata.type": "#SessionService.v1_1_8.SessionService",
            "Id": "SessionService",
            "Name": "Session Service",
            "Description": "Session Service",
            "ServiceEnabled": True,
            "SessionTimeout": int(bmc.sessions.timeout),
            "Status": status_ok(),
            "Sessions": link(SESSIONS),
        },
        revision=0,
    )


def _session_doc(session: Session) -> JsonDict:
    # NOTE: as bmcweb's fillSessionObject (redfish-core/lib/redfish_sessions.hpp): the client's
    # address always, `Context` only when the login set one
    doc: JsonDict = {
        "@odata.id": f"{SESSIONS}/{session.id}",
        "@odata.type": "#Session.v1_7_0.Session",
        "Id": session.id,
        "Name": "User Session",
        "Description": "Manager User Session",
        "UserName": session.username,
        "Password": None,
        "SessionType": "Redfish",
        "ClientOriginIPAddress": session.client,
    }
    if session.context is not None:
        doc["Context"] = session.context
    return doc


def _sessions(bmc: Bmc, req: SimRequest) -> Reply:
    bmc.stats.sessions_expired += bmc.sessions.purge_expired()
    members = [f"{SESSIONS}/{sid}" for sid in bmc.sessions.ids()]
    body = collection(SESSIONS, "#SessionCollection.SessionCollection", "Session Collection", members)
    return Reply(body=body, revision=bmc.sessions.revision)


def _login(bmc: Bmc, req: SimRequest) -> Reply:
    body = require_object(req.body)
    missing = [p for p in ("UserName", "Password") if p not in body]
    if missing:
        raise _errors.bad_request([_messages.property_missing(p) for p in missing])
    # DMTF Session.Context: a client-supplied string stored with the session and shown on it
    # (bmcweb reads it in handleSessionCollectionPost, redfish-core/lib/redfish_sessions.hpp)
    context = body.get("Context")
    if context is not None and bmc.config.session_context == "reject":
        # NOTE: bmcweb before bb759e3 (2022-08, "Move ClientID parameter out of OEM") read only
        # UserName, Password and Oem (redfish-core/lib/redfish_sessions.hpp); readJson answers any
        # other key with propertyUnknown (utils/json_utils.hpp): 400, MessageArgs ["Context"] and
        # no RelatedProperties (registries.hpp getLog)
        unknown = _messages.property_unknown("Context")
        unknown.pop("RelatedProperties", None)
        raise _errors.bad_request([unknown])
    if context is not None and not isinstance(context, str):
        raise _errors.bad_request([_messages.property_value_type_error(context, "Context")])
    if not bmc.sessions.credentials_ok(body["UserName"], body["Password"]):
        bmc.stats.logins_failed += 1
        raise _errors.login_failed(SESSIONS)
    bmc.stats.sessions_expired += bmc.sessions.purge_expired()
    if bmc.sessions.is_full():
        bmc.stats.session_limit_rejections += 1
        raise _errors.session_limit_exceeded()
    kept = context if bmc.config.session_context == "keep" else None
    session = bmc.sessions.create(body["UserName"], context=kept, client=req.client)
    bmc.stats.sessions_created += 1
    location = f"{SESSIONS}/{session.id}"
    return Reply(
        status=201,
        body=_session_doc(session),
        headers={"X-Auth-Token": session.token, "Location": location},
        revision=0,
    )


def _session(bmc: Bmc, req: SimRequest) -> Reply:
    session = bmc.sessions.by_id(req.params["id"])
    if session is None:
        raise _errors.resource_not_found(req.path)
    return Reply(body=_session_doc(session), revision=0)


def _logout(bmc: Bmc, req: SimRequest) -> Reply:
    if not bmc.sessions.delete(req.params["id"]):
        raise _errors.resource_not_found(req.path)
    bmc.stats.sessions_deleted += 1
    return Reply(status=204)


# --- tasks -----------------------------------------------------------------------------------------------


def _task_service(bmc: Bmc, req: SimRequest) -> Reply:
    return Reply(
        body={
            "@odata.id": f"{ROOT}/TaskService",
            "@odata.type": "#TaskService.v1_2_0.TaskService",
            "Id": "TaskService",
            "Name": "Task Service",
            "ServiceEnabled": True,
            "CompletedTaskOverWritePolicy": "Oldest",
            "LifeCycleEventOnTaskStateChange": True,
            "Status": status_ok(),
            "Tasks": link(TASKS_PATH),
        },
        revision=0,
    )


def _tasks(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{TASKS_PATH}/{tid}" for tid in bmc.tasks.ids()]
    body = collection(TASKS_PATH, "#TaskCollection.TaskCollection", "Task Collection", members)
    return Reply(body=body, revision=len(members))


def _task(bmc: Bmc, req: SimRequest) -> Reply:
    task = bmc.tasks.get(req.params["id"])
    if task is None:
        raise _errors.resource_not_found(req.path)
    return Reply(body=task.document(), revision=int(task.state == "Completed"))


# --- managers, top-level collections, firmware -------------------------------------------------------------


def _managers(bmc: Bmc, req: SimRequest) -> Reply:
    path = f"{ROOT}/Managers"
    body = collection(
        path,
        "#ManagerCollection.ManagerCollection",
        "Manager Collection",
        [f"{path}/{bmc.platform.manager_id}"],
    )
    return Reply(body=body, revision=0)


def manager_document(bmc: Bmc) -> JsonDict:
    """The BMC's Manager resource (models may add links, e.g. NVIDIA NodeManager)."""
    platform = bmc.platform
    return {
        "@odata.id": f"{ROOT}/Managers/{platform.manager_id}",
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": platform.manager_id,
        "Name": "Manager",
        "ManagerType": "BMC",
        "Manufacturer": platform.vendor,
        "Model": f"{platform.product} BMC",
        "FirmwareVersion": bmc.firmware_version,
        "UUID": service_uuid(bmc),
        "PowerState": "On",
        "Status": status_ok(),
        "Links": {
            "ManagerForChassis": [link(f"{ROOT}/Chassis/{c}") for c in platform.chassis],
            "ManagerForServers": [link(f"{ROOT}/Systems/{s}") for s in platform.systems],
        },
    }


def _manager(bmc: Bmc, req: SimRequest) -> Reply:
    if req.params["id"] != bmc.platform.manager_id:
        raise _errors.resource_not_found(req.path)
    return Reply(body=manager_document(bmc), revision=0)


def extra_systems(bmc: Bmc) -> tuple[str, ...]:
    """Systems a layout variant or profile adds: a SmartNIC's SoC; the host of a bmcweb GB200 BMC."""
    if bmc.platform.name.startswith("dmtf") and "smartnic" in bmc.config.layout:
        return ("SmartNIC",)
    if bmc.platform.name == "gb200" and bmc.config.profile == "bmcweb":
        return ("System_0",)  # the host's system: not on the DPS proxy's allow-list
    return ()


def extra_chassis(bmc: Bmc) -> tuple[str, ...]:
    """Chassis a layout variant adds, listed first: an enclosure with its own cap."""
    if bmc.platform.name.startswith("dmtf") and "multi-chassis" in bmc.config.layout:
        return ("Enclosure",)
    return ()


def _systems(bmc: Bmc, req: SimRequest) -> Reply:
    path = f"{ROOT}/Systems"
    members = [f"{path}/{s}" for s in (*bmc.platform.systems, *extra_systems(bmc))]
    body = collection(
        path, "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", members
    )
    return Reply(body=body, revision=0)


def _chassis(bmc: Bmc, req: SimRequest) -> Reply:
    path = f"{ROOT}/Chassis"
    members = [f"{path}/{c}" for c in (*extra_chassis(bmc), *bmc.platform.chassis)]
    body = collection(path, "#ChassisCollection.ChassisCollection", "Chassis Collection", members)
    return Reply(body=body, revision=0)


def _update_service(bmc: Bmc, req: SimRequest) -> Reply:
    return Reply(
        body={
            "@odata.id": f"{ROOT}/UpdateService",
            "@odata.type": "#UpdateService.v1_11_0.UpdateService",
            "Id": "UpdateService",
            "Name": "Update Service",
            "ServiceEnabled": True,
            "FirmwareInventory": link(f"{ROOT}/UpdateService/FirmwareInventory"),
        },
        revision=0,
    )


def _firmware_inventory(bmc: Bmc, req: SimRequest) -> Reply:
    path = f"{ROOT}/UpdateService/FirmwareInventory"
    members = [f"{path}/{f}" for f in bmc.platform.firmware_inventory]
    body = collection(
        path, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory", members
    )
    return Reply(body=body, revision=0)


def _firmware(bmc: Bmc, req: SimRequest) -> Reply:
    fw_id = req.params["id"]
    if fw_id not in bmc.platform.firmware_inventory:
        raise _errors.resource_not_found(req.path)
    return Reply(
        body={
            "@odata.id": f"{ROOT}/UpdateService/FirmwareInventory/{fw_id}",
            "@odata.type": "#SoftwareInventory.v1_4_0.SoftwareInventory",
            "Id": fw_id,
            "Name": "Software Inventory",
            "Manufacturer": bmc.platform.vendor,
            "Version": bmc.firmware_version,
            "Updateable": True,
            "Status": status_ok(),
        },
        revision=0,
    )


def common_routes() -> list[Route]:
    """Routes shared by every platform model."""
    return [
        Route("/redfish", get=_redfish, public=PUBLIC_GET),
        Route(ROOT, get=_root, public=PUBLIC_GET),
        Route(f"{ROOT}/odata", get=_odata, public=PUBLIC_GET),
        Route(METADATA, get=metadata, public=PUBLIC_GET),
        Route(f"{ROOT}/SessionService", get=_session_service),
        Route(SESSIONS, get=_sessions, post=_login, public=frozenset({"POST"})),
        # DSP0266: a POST to a collection's `Members` is a POST to the collection
        Route(f"{SESSIONS}/Members", post=_login, public=frozenset({"POST"})),
        Route(f"{SESSIONS}/{{id}}", get=_session, delete=_logout),
        Route(f"{ROOT}/TaskService", get=_task_service),
        Route(TASKS_PATH, get=_tasks),
        Route(f"{TASKS_PATH}/{{id}}", get=_task),
        *monitor_routes(),
        Route(f"{ROOT}/Managers", get=_managers),
        Route(f"{ROOT}/Managers/{{id}}", get=_manager),
        Route(f"{ROOT}/Systems", get=_systems),
        Route(f"{ROOT}/Chassis", get=_chassis),
        *account_routes(),
    ]


def firmware_routes() -> list[Route]:
    """UpdateService routes, for platforms that publish a firmware inventory."""
    return [
        Route(f"{ROOT}/UpdateService", get=_update_service),
        Route(f"{ROOT}/UpdateService/FirmwareInventory", get=_firmware_inventory),
        Route(f"{ROOT}/UpdateService/FirmwareInventory/{{id}}", get=_firmware),
    ]
