"""Workload power profiles: id offset, validation, UpdateProfiles_v1 and its fallback, verification."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pynvml
import pytest

from plugins.base import InvalidRequestError, PendingVerification, ProfileChange
from plugins.nvml import OOB_OFFSET, to_nvml_id, to_oob_id
from plugins.nvml._profiles import make_mask, mask_bits, name_ids, nvml_ids
from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]

UPDATE = "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1"
SET_REQUESTED = "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles"
CLEAR_REQUESTED = "nvmlDeviceWorkloadPowerProfileClearRequestedProfiles"


def test_out_of_band_ids_are_nvml_ids_plus_three() -> None:
    assert OOB_OFFSET == 3
    assert to_nvml_id(4) == pynvml.NVML_POWER_PROFILE_MAX_Q == 1  # nvidia-smi 1 is 4 through Redfish
    assert to_oob_id(pynvml.NVML_POWER_PROFILE_COMPUTE) == 5
    assert nvml_ids([3, 258]) == {0, 255}
    assert name_ids({2, 1}) == "4 (MAX_Q), 5 (COMPUTE)"


@pytest.mark.parametrize("bad", [0, 2, 259, -1])
def test_ids_outside_the_out_of_band_range_are_invalid(bad: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"outside 3\.\.258"):
        nvml_ids([bad])


def test_masks_round_trip_all_255_bits() -> None:
    ids = {0, 1, 31, 32, 63, 100, 254, 255}
    mask = make_mask(ids)
    assert isinstance(mask, pynvml.c_nvmlMask255_t)
    assert mask_bits(mask) == ids
    assert mask.mask[0] == 0x8000_0003


async def test_enable_uses_update_profiles_and_reports_enforced_out_of_band_ids(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5, 9)))  # COMPUTE, BALANCED
    result = out.result
    assert result.ok, result.error
    assert [g.gpu_id for g in result.gpus] == ["0", "1"]
    assert result.gpus[0].enforced == (5, 9)
    assert b200x2.fake.gpu(0).requested_profiles == {2, 6}
    assert b200x2.fake.called(UPDATE) == 2 and b200x2.fake.called(SET_REQUESTED) == 0
    assert b200x2.state["profiles"][b200x2.uuid(0)] == {"prior_requested": [], "enabled": [2, 6]}


async def test_disable_clears_only_the_named_profiles(b200x2: FakeNode) -> None:
    await b200x2.do("enable_profiles", ProfileChange(enable=(5, 9)))
    out = await b200x2.do("disable_profiles", ProfileChange(disable=(5,)))
    assert out.result.ok
    assert b200x2.fake.gpu(1).requested_profiles == {6}
    assert out.result.gpus[1].enforced == (9,)


async def test_update_enables_and_disables_in_one_request(b200x2: FakeNode) -> None:
    await b200x2.do("enable_profiles", ProfileChange(enable=(5,)))
    out = await b200x2.do("update_profiles", ProfileChange(enable=(10,), disable=(5,)))
    assert out.result.ok
    assert b200x2.fake.gpu(0).requested_profiles == {7}


async def test_conflicting_profiles_are_arbitrated_and_explained(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(3, 4)))  # MAX_P and MAX_Q
    gpu = out.result.gpus[0]
    assert gpu.ok  # both are requested; the GPU enforces one
    assert gpu.enforced == (4,)
    assert "conflict: the GPU enforces 4 (MAX_Q) (higher priority)" in gpu.message


async def test_unsupported_ids_are_rejected_per_gpu_without_a_write(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5, 40)))
    assert not out.result.ok
    gpu = out.result.gpus[0]
    assert "profile(s) 40 not supported by this GPU" in gpu.message
    assert "supported: 3 (MAX_P), 4 (MAX_Q), 5 (COMPUTE)" in gpu.message
    assert not b200x2.fake.writes()
    assert out.verification is None


async def test_gpus_without_profiles_say_so(h100x4: FakeNode) -> None:
    out = await h100x4.do("enable_profiles", ProfileChange(enable=(5,)))
    assert not out.result.ok
    assert all("need Blackwell or newer" in g.message for g in out.result.gpus)
    assert "4 of 4 GPU(s) failed" in out.result.error
    assert out.verification is None


async def test_the_same_id_enabled_and_disabled_is_invalid(b200x2: FakeNode) -> None:
    with pytest.raises(InvalidRequestError, match="both enabled and disabled"):
        await b200x2.do("update_profiles", ProfileChange(enable=(5,), disable=(5,)))


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED])
async def test_older_drivers_fall_back_to_set_and_clear(b200x2: FakeNode, code: int) -> None:
    b200x2.fake.fail(UPDATE, code)
    await b200x2.do("enable_profiles", ProfileChange(enable=(5, 9)))
    out = await b200x2.do("disable_profiles", ProfileChange(disable=(9,)))
    assert out.result.ok
    assert b200x2.fake.called(SET_REQUESTED) == 2 and b200x2.fake.called(CLEAR_REQUESTED) == 2
    assert b200x2.fake.gpu(0).requested_profiles == {2}


async def test_r570_driver_without_update_profiles(make_node: MakeNode) -> None:
    node = await make_node("b200", driver_version="570.133.20")
    out = await node.do("enable_profiles", ProfileChange(enable=(5,)))
    assert out.result.ok
    assert node.fake.called(SET_REQUESTED) == 1


async def test_without_root_profile_changes_fail_with_a_permission_message(make_node: MakeNode) -> None:
    node = await make_node("b200", privileged=False)
    out = await node.do("enable_profiles", ProfileChange(enable=(5,)))
    assert not out.result.ok and "NVML_ERROR_NO_PERMISSION" in out.result.gpus[0].message


async def test_the_wpps_capability_allows_unprivileged_updates_on_r615(make_node: MakeNode) -> None:
    node = await make_node("b200", privileged=False, wpps_capability=True, driver_version="615.10")
    out = await node.do("enable_profiles", ProfileChange(enable=(5,)))
    assert out.result.ok, out.result.error


# ---- asynchronous verification ---------------------------------------------------------------------


async def test_verification_is_requested_and_passes(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5,)))
    pending = out.verification
    assert pending is not None
    assert out.result.verification_id == pending.verification_id
    assert pending.check_after_seconds == 0.0  # the fixture's setting; the default is 1 s
    assert pending.payload["gpus"][b200x2.uuid(0)] == {"gpu_id": 0, "on": [2], "off": []}
    result = await b200x2.plugin.verify(b200x2.ctx(), pending)
    assert (result.done, result.status) == (True, "verified")
    assert "requested 5 (COMPUTE), enforced 5 (COMPUTE)" in result.detail


async def test_verification_waits_while_the_requested_set_does_not_show_the_change(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5,)))
    assert out.verification is not None
    profiles = b200x2.fake.gpu(1).profiles
    assert profiles is not None
    profiles.requested.clear()  # another client cleared it meanwhile
    result = await b200x2.plugin.verify(b200x2.ctx(), out.verification)
    assert (result.done, result.status) == (False, "pending")  # the controller checks again
    assert f"GPU 1 ({b200x2.uuid(1)}): the requested profiles do not show the change" in result.detail


async def test_verification_reports_an_arbitrated_enforced_set_as_a_mismatch(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(3, 4)))  # MAX_P loses to MAX_Q
    assert out.verification is not None
    result = await b200x2.plugin.verify(b200x2.ctx(), out.verification)
    assert (result.done, result.status) == (True, "mismatch")
    assert "enforced 4 (MAX_Q)" in result.detail


async def test_verification_of_a_lost_gpu_fails_and_transient_errors_wait(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5,)))
    pending = out.verification
    assert pending is not None
    b200x2.fake.fail("nvmlDeviceWorkloadPowerProfileGetCurrentProfiles", pynvml.NVML_ERROR_NOT_READY, times=1)
    result = await b200x2.plugin.verify(b200x2.ctx(), pending)
    assert (result.done, result.status) == (False, "pending")
    b200x2.fake.lose(b200x2.uuid(0))
    result = await b200x2.plugin.verify(b200x2.ctx(), pending)
    assert (result.done, result.status) == (True, "failed")
    assert "GPU is lost" in result.detail


async def test_no_verification_when_not_asked(b200x2: FakeNode) -> None:
    out = await b200x2.do("enable_profiles", ProfileChange(enable=(5,), verify=False))
    assert out.verification is None and out.result.verification_id == ""


async def test_an_unknown_verification_fails(b200x2: FakeNode) -> None:
    result = await b200x2.plugin.verify(b200x2.ctx(), PendingVerification("v", 0.0, {"check": "other"}))
    assert (result.done, result.status) == (True, "failed")


async def test_a_change_without_ids_only_reports(b200x2: FakeNode) -> None:
    out = await b200x2.do("update_profiles", ProfileChange())
    assert out.result.ok and out.verification is None
    assert not b200x2.fake.writes() and b200x2.state["profiles"] == {}
