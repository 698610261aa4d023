"""Protocol conformance shared by every model: `$metadata`, the standard headers, request checks.

- `$metadata` (no authentication) lists the schema namespaces the BMC's documents really use, found
  by walking its own resources, and references DMTF's published CSDL files by URL, as real BMCs do
  (nothing of DMTF's is copied in). OEM namespaces (met under an `Oem` object) point at
  `/redfish/v1/schema/…`, where vendors publish theirs;
- every GET/HEAD reply of a typed resource carries `Link: <…json schema…>; rel=describedby` and
  `Allow`; a 401 carries `WWW-Authenticate`;
- `OData-Version` other than 4.0 gets 412; a `$` query parameter gets 501 (the service root
  advertises no query support).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import quoteattr

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod
from aiohttp.web_protocol import RequestHandler

from bmcsim import _errors, _messages
from bmcsim._routing import Reply, SimRequest

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

METADATA = "/redfish/v1/$metadata"
DMTF_SCHEMAS = "http://redfish.dmtf.org/schemas/v1"
DMTF_JSON_SCHEMAS = "https://redfish.dmtf.org/schemas/v1"
#: the walk that finds the namespaces stops after this many resources
_WALK_LIMIT = 4000
#: every Redfish service's CSDL builds on these (annotations, common types)
_ALWAYS = {"RedfishExtensions": {"RedfishExtensions.v1_0_0"}, "Resource": {"Resource", "Resource.v1_0_0"}}
WWW_AUTHENTICATE = 'Basic realm="Redfish", charset="UTF-8"'


def check_request(method: str, headers: Mapping[str, str], query: Mapping[str, str]) -> None:
    """Refuse what the service does not support: another OData version, `$` query parameters."""
    version = headers.get("OData-Version")
    if version is not None and version.strip() != "4.0":
        raise odata_version_unsupported(version.strip()[:16])
    for name in query:
        if name.startswith("$"):
            raise query_not_supported(name[:32])


def query_not_supported(param: str) -> _errors.RedfishError:
    """501 for a `$` query parameter the service does not implement."""
    return _errors.RedfishError(
        501,
        [
            _messages.message(
                _messages.BASE + "QueryNotSupported",
                "Querying is not supported by the implementation.",
                [param],
                resolution="Remove the query parameters and resubmit the request if the operation failed.",
            )
        ],
    )


def odata_version_unsupported(version: str) -> _errors.RedfishError:
    """412 for a request that asks for an OData version other than 4.0."""
    return _errors.RedfishError(
        412,
        [
            _messages.message(
                _messages.BASE + "HeaderInvalid",
                f"The header 'OData-Version: {version}' is invalid: this service supports OData 4.0.",
                [f"OData-Version: {version}"],
                severity="Critical",
                resolution="Resubmit the request with a valid request header.",
            )
        ],
    )


def method_not_implemented() -> _errors.RedfishError:
    """501 for an HTTP method the service does not implement at all (not merely on this resource)."""
    return _errors.RedfishError(
        501,
        [
            _messages.message(
                _messages.BASE + "OperationNotAllowed",
                "The HTTP method is not implemented by this service.",
                severity="Critical",
                resolution="Use GET, HEAD, POST, PATCH or DELETE.",
            )
        ],
    )


class RedfishRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering an HTTP method nobody knows like a Redfish service."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, BadHttpMethod):
            # the C parser refuses unknown method tokens before any handler runs; DSP0266 wants 501
            err = method_not_implemented()
            headers = {"OData-Version": "4.0", "Cache-Control": "no-store"}
            return web.json_response(err.body, status=err.status, headers=headers)
        return super().handle_error(request, status, exc, message)


def add_headers(method: str, reply: Reply, allow: list[str] | None, headers: dict[str, str]) -> None:
    """`Allow`, `Link: rel=describedby` and `WWW-Authenticate` where the protocol wants them."""
    if allow and (reply.status == 405 or (method in ("GET", "HEAD") and reply.status < 300)):
        headers.setdefault("Allow", ", ".join(allow))
    if reply.status == 401:
        headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    body = reply.body
    if method in ("GET", "HEAD") and reply.status == 200 and body is not None:
        odata_type = body.get("@odata.type")
        if isinstance(odata_type, str) and odata_type.startswith("#"):
            headers["Link"] = f"<{json_schema_uri(odata_type)}>; rel=describedby"


def json_schema_uri(odata_type: str) -> str:
    """DMTF's JSON schema for a type: `#Chassis.v1_20_0.Chassis` -> `…/Chassis.v1_20_0.json`."""
    parts = odata_type.lstrip("#").split(".")
    name = ".".join(parts[:2]) if len(parts) == 3 else parts[0]
    return f"{DMTF_JSON_SCHEMAS}/{name}.json"


def metadata(bmc: Bmc, req: SimRequest) -> Reply:
    """The OData metadata document of this BMC (XML)."""
    dmtf: dict[str, set[str]] = {k: set(v) for k, v in _ALWAYS.items()}
    oem: dict[str, set[str]] = {}
    for odata_type, in_oem in _types(bmc):
        parts = odata_type.lstrip("#").split(".")
        if len(parts) < 2:
            continue
        base = parts[0]
        found = oem if in_oem else dmtf
        namespaces = found.setdefault(base, set())
        namespaces.add(base)
        if len(parts) == 3:
            namespaces.add(f"{base}.{parts[1]}")
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">',
    ]
    for refs, where in ((dmtf, DMTF_SCHEMAS), (oem, "/redfish/v1/schema")):
        for base in sorted(refs):
            lines.append(f"  <edmx:Reference Uri={quoteattr(f'{where}/{base}_v1.xml')}>")
            for namespace in sorted(refs[base]):
                alias = ' Alias="Redfish"' if namespace == "RedfishExtensions.v1_0_0" else ""
                lines.append(f"    <edmx:Include Namespace={quoteattr(namespace)}{alias}/>")
            lines.append("  </edmx:Reference>")
    root_ns = max((n for n in dmtf.get("ServiceRoot", ()) if "." in n), default="ServiceRoot.v1_0_0")
    lines += [
        "  <edmx:DataServices>",
        '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">',
        f'      <EntityContainer Name="Service" Extends="{root_ns}.ServiceContainer"/>',
        "    </Schema>",
        "  </edmx:DataServices>",
        "</edmx:Edmx>",
    ]
    return Reply(text="\n".join(lines) + "\n", content_type="application/xml")


def _types(bmc: Bmc) -> Iterator[tuple[str, bool]]:
    """Every `@odata.type` in the BMC's documents, and whether it sits under an `Oem` object."""
    seen = {"/redfish/v1"}
    queue = deque(["/redfish/v1"])
    while queue and len(seen) < _WALK_LIMIT:
        path = queue.popleft()
        body = _get(bmc, path)
        if body is None:
            continue
        # an OEM resource (e.g. NVIDIA's `…/Oem/Nvidia/WorkloadPowerProfile`) has an OEM schema
        stack: list[tuple[Any, bool]] = [(body, "/Oem/" in path)]
        while stack:
            node, in_oem = stack.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == "@odata.type" and isinstance(value, str):
                        yield value, in_oem
                    elif key == "@odata.id" and isinstance(value, str):
                        target = value.split("#")[0].rstrip("/")
                        if target.startswith("/redfish/v1/") and target not in seen:
                            seen.add(target)
                            queue.append(target)
                    else:
                        stack.append((value, in_oem or key == "Oem"))
            elif isinstance(node, list):
                stack.extend((item, in_oem) for item in node)


def _get(bmc: Bmc, path: str) -> dict[str, Any] | None:
    matched = bmc.platform.router.match(path)
    if matched is None or matched[0].get is None or path.startswith("/redfish/v1/TaskService/TaskMonitors"):
        return None
    route, params = matched
    try:
        reply = route.get(bmc, SimRequest("GET", path, params))  # type: ignore[misc]
    except _errors.RedfishError:
        return None
    return reply.body if isinstance(reply, Reply) else None
