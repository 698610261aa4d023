"""Device specs: the catalogue's entry for a known model (any case), a generic spec for another."""

from __future__ import annotations

from plugins.base import ElementType, SystemSpec
from plugins.base._spec import CATALOGUE, ComponentSpec


def test_a_known_model_is_its_catalogue_entry_and_another_a_generic_spec_named_after_it() -> None:
    for name in ("DGX_GB200", "dgx_gb200", "DGX_H100"):
        assert SystemSpec.known(name) is CATALOGUE[name.upper()]
    other = SystemSpec.known("GB200_NO_IDLE")
    assert other == SystemSpec(model="GB200_NO_IDLE") and other.node == ComponentSpec(count=1)
    spec = SystemSpec.from_model({"Model": "dgx_gb200", "Name": "node0", "spec": {"maxLoadWatts": 6000}})
    assert spec.model == "dgx_gb200" and spec.name == "node0" and spec.node.max_watts == 6000
    assert spec.gpu == CATALOGUE["DGX_GB200"].gpu


def test_a_specs_component_is_the_one_its_element_names() -> None:
    spec = CATALOGUE["DGX_GB200"]
    assert [spec.component(e) for e in ElementType] == [spec.node, spec.gpu, spec.cpu, spec.memory]
