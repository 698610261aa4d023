"""Plugin config as Nomad sends it: the spec's defaults, types and required attributes, and cty's
msgpack (every attribute, nulls where unset), on the plugin side and the host side alike.

Facts from Nomad v1.6.5: `helper/pluginutils/loader/init.go` (validatePluginConfig: parse with
the spec, msgpack-encode the cty value, SetConfig), `helper/pluginutils/hclspecutils/dec.go`
(Default = primary attribute + literal), and cty's `msgpack/marshal.go` (objects as maps, null
as nil, whole numbers as integers).
"""

from __future__ import annotations

import msgpack
import pytest

from plugins._proto.nomad.plugins.shared.hclspec import hcl_spec_pb2 as hpb
from plugins.base import InvalidRequestError
from plugins.base import nomad as n
from plugins.base.plugin_config import ConfigSpec, decode_config, encode_config, settings, unpack_config
from plugins.base.serving import config_spec
from plugins.filedevices import FileDevicesPlugin

SCHEMA = {
    "type": "object",
    "properties": {
        "dir": {"type": "string"},
        "period": {"type": "number", "default": 5},
        "enabled": {"type": "boolean", "default": True},
        "ids": {"type": "array", "items": {"type": "string"}, "default": []},
        "name": {"type": "string"},
    },
    "required": ["dir"],
}
SPEC = ConfigSpec.from_pb(n.schema_to_hcl(SCHEMA))


def test_an_empty_block_gets_every_attribute_with_the_defaults_and_nulls() -> None:
    assert decode_config(SPEC, {"dir": "/srv"}) == {
        "dir": "/srv",
        "enabled": True,
        "ids": [],
        "name": None,
        "period": 5,
    }


def test_nulls_are_not_set() -> None:
    """What a Nomad client sends for `config { dir = "/srv" }`: the other attributes as nil."""
    wire = msgpack.packb({"dir": "/srv", "enabled": None, "ids": None, "name": None, "period": None})
    config = unpack_config(SPEC, wire)
    assert config["period"] == 5 and config["enabled"] is True and config["name"] is None
    assert settings(config) == {"dir": "/srv", "enabled": True, "ids": [], "period": 5}


def test_values_are_converted_to_the_declared_types_as_cty_does() -> None:
    config = decode_config(SPEC, {"dir": 7, "period": "2.5", "enabled": "false", "ids": [1, True]})
    assert config["dir"] == "7" and config["period"] == 2.5 and config["enabled"] is False
    assert config["ids"] == ["1", "true"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "the argument 'dir' is required"),
        ({"dir": "/x", "bogus": 1}, "unsupported argument(s) bogus"),
        ({"dir": "/x", "period": "soon"}, "period: a number is required"),
        ({"dir": "/x", "enabled": 3}, "enabled: expected bool"),
        ({"dir": "/x", "ids": "a"}, "ids: expected list(string)"),
        ([1], "expected an object"),
    ],
)
def test_bad_config_gets_one_clear_line(raw: object, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_config(SPEC, raw)


def test_the_msgpack_is_ctys_every_attribute_sorted_whole_numbers_as_integers() -> None:
    wire = encode_config(decode_config(SPEC, {"dir": "/srv", "period": 3.0}))
    assert list(msgpack.unpackb(wire)) == ["dir", "enabled", "ids", "name", "period"]
    assert msgpack.unpackb(wire)["period"] == 3 and isinstance(msgpack.unpackb(wire)["period"], int)
    assert wire[:1] == b"\x85"  # a fixmap of five: nulls included


def test_a_go_plugins_spec_with_its_own_literals_decodes() -> None:
    """Nomad's example device plugin: `dir` defaults to ".", `list_period` to "5s" (strings)."""
    spec = hpb.Spec(object=hpb.Object())
    for name, literal in (("dir", '"."'), ("list_period", '"5s"')):
        attr = hpb.Spec(Attr=hpb.Attr(name=name, type="string"))
        default = hpb.Spec(literal=hpb.Literal(value=literal))
        spec.object.attributes[name].CopyFrom(hpb.Spec(default=hpb.Default(primary=attr, default=default)))
    assert decode_config(ConfigSpec.from_pb(spec), {"dir": "/d"}) == {"dir": "/d", "list_period": "5s"}


def test_a_plugin_without_a_spec_takes_no_config() -> None:
    assert decode_config(ConfigSpec.from_pb(hpb.Spec()), None) == {}
    with pytest.raises(InvalidRequestError, match="this plugin takes: none"):
        decode_config(ConfigSpec.from_pb(hpb.Spec()), {"x": 1})


def test_filedevices_accepts_list_period_null(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plugin = FileDevicesPlugin()
    config = unpack_config(config_spec(plugin), msgpack.packb({"dir": str(tmp_path), "list_period": None}))
    plugin.set_config(settings(config))
    assert plugin._period == 5 and plugin._dir == tmp_path
