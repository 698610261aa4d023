"""What a BMC's redirect makes a read do, and what its errors show (`plugins.redfish._wire.redirect`)."""

from __future__ import annotations

import pytest

from plugins.redfish._wire.errors import ProtocolError
from plugins.redfish._wire.redirect import redirect_target, without_userinfo

URL = "https://10.0.0.1:443/redfish/v1/Chassis"


@pytest.mark.parametrize(("status", "method", "hops"), [(302, "PATCH", 0), (302, "GET", 99), (200, "GET", 0)])
def test_a_redirect_not_followed_never_shows_a_credential_its_location_carries(
    status: int, method: str, hops: int
) -> None:
    location = "https://admin:hunter2@evil.example/redfish/v1/Chassis"
    with pytest.raises(ProtocolError) as refused:
        redirect_target(URL, "bmc: GET /redfish/v1/Chassis", method, status, location, hops)
    assert "hunter2" not in str(refused.value) and "admin:" not in str(refused.value)
    assert "evil.example" in str(refused.value)  # the rest of where it pointed is still named


def test_without_userinfo_keeps_everything_but_the_credential() -> None:
    assert without_userinfo("https://u:p@h:8443/a?b=c") == "https://h:8443/a?b=c"
    assert without_userinfo("/redfish/v1/Sessions/1") == "/redfish/v1/Sessions/1"
