"""An inventory that refuses typos: unknown tables and keys (with the nearest known name), model
names no plugin knows, and plaintext `http://` BMC URLs, refused by `devicectl inventory check`
and by `serve` (which would otherwise start with 0 devices, or fail every request later)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.inventory import InventoryError, check_inventory, load_inventory, plugin_registry
from controller.security.secrets import SecretStore
from tests.controller.api.test_service import ping
from tests.controller.cli.test_serve_and_send import devicectl
from tests.hostile.conftest import LogCapture, log_capture  # noqa: F401  (fixture)
from tests.hostile.test_resolve import _answer

DEVICE = '[[device]]\nid = "n1"\nplugin = "redfish"\nmodel = "DGX_GB200"\n[device.redfish]\nurl = "https://10.0.0.1"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DEVICE.replace("[[device]]", "[[devices]]"), "unknown table [[devices]]; did you mean [[device]]?"),
        ('[default]\nplugin = "redfish"\n' + DEVICE, "unknown table [default]; did you mean [defaults]?"),
        ("[secret.x]\nallow = []\n" + DEVICE, "unknown table [secret]; did you mean [secrets]?"),
        ("bmcs = 1\n" + DEVICE, "unknown key `bmcs` (known: defaults, device, plugin, secrets)"),
        (
            DEVICE.replace('model = "DGX_GB200"', 'modle = "DGX_GB200"'),
            "device[0] (n1): unknown key `modle` in [device]; did you mean `model`?",
        ),
        (
            DEVICE.replace("[device.redfish]", "[device.redfsh]"),
            "device[0] (n1): unknown table [device.redfsh]; did you mean [device.redfish]?",
        ),
        (
            '[defaults]\nplugn = "redfish"\n' + DEVICE,
            "unknown key `plugn` in [defaults]; did you mean `plugin`?",
        ),
        (
            DEVICE.replace("https://", "http://"),
            "device[0] (n1): url 'http://10.0.0.1' must start with https://",
        ),
    ],
    ids=["devices", "default", "secret", "top-key", "device-key", "device-table", "defaults-key", "http"],
)
def test_typos_are_refused_with_a_suggestion(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value) == f"{path}: {message}"


def test_what_the_documented_layouts_hold_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(
        '[defaults]\nplugin = "redfish"\n[defaults.redfish]\nconcurrency = 2\n\n'
        + DEVICE.replace('plugin = "redfish"\n', "")
        + '\n[[device]]\nid = "g1"\nplugin = "nvml"\nbmc = "n1"\nbmc_gpus = [1, 0]\n'
        + '[device.connection]\nsecret = "s"\n\n[secrets.s]\nallow = ["10.0.0.0/8"]\n'
    )
    entries = load_inventory(path)
    assert entries["n1"].url == "https://10.0.0.1" and entries["g1"].bmc == "n1"
    example = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "inventory.toml"
    assert len(load_inventory(example)) == 3


def _problems(tmp_path: Path, model: str) -> list[str]:
    path = tmp_path / "inventory.toml"
    path.write_text(DEVICE.replace('model = "DGX_GB200"', f"model = {model}"))
    entries = load_inventory(path)
    return check_inventory(entries, plugin_registry(entries, "redfish"), SecretStore(None))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ('"DGX_GB2OO"', "device 'n1': unknown model 'DGX_GB2OO' (did you mean 'DGX_GB200'?"),
        ('"DGX_H1OO"', "device 'n1': unknown model 'DGX_H1OO' (did you mean 'DGX_H100'?"),
        ('"PowerEdge"', "device 'n1': unknown model 'PowerEdge' (known: DGX_B200, DGX_B200EM, DGX_B300,"),
        ('{ Model = "DGX_GB2OO" }', "device 'n1': unknown model 'DGX_GB2OO'"),
    ],
)
def test_an_unknown_model_name_is_flagged(tmp_path: Path, model: str, message: str) -> None:
    problems = _problems(tmp_path, model)
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.parametrize(
    "model",
    ['"DGX_GB200"', '"dgx_h100"', '"auto"', '"GENERIC_DMTF"', '{ Model = "MyBox", Redfish = { URL = "x" } }'],
)
def test_known_models_and_described_ones_pass(tmp_path: Path, model: str) -> None:
    assert _problems(tmp_path, model) == []


def test_inventory_check_as_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(DEVICE.replace("[[device]]", "[[devices]]"))
    result = devicectl("inventory", "check", "--inventory", str(path), check=False)
    assert result.returncode == 2, result
    assert result.stderr.strip() == f"error: {path}: unknown table [[devices]]; did you mean [[device]]?"
    assert "ok" not in result.stdout

    path.write_text(DEVICE.replace("DGX_GB200", "DGX_GB2OO"))
    result = devicectl("--json", "inventory", "check", "--inventory", str(path), check=False)
    assert result.returncode == 1, result
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["devices"][0]["problems"][0].startswith(
        "unknown model 'DGX_GB2OO' (did you mean 'DGX_GB200'?"
    )

    path.write_text(DEVICE.replace("https://", "http://"))
    result = devicectl("inventory", "check", "--inventory", str(path), check=False)
    assert result.returncode == 2 and "url 'http://10.0.0.1' must start with https://" in result.stderr
    for output in (result.stdout, result.stderr):
        assert "Traceback" not in output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DEVICE.replace("[[device]]", "[[devices]]"), "unknown table [[devices]]; did you mean [[device]]?"),
        (DEVICE.replace("DGX_GB200", "DGX_GB2OO"), "unknown model 'DGX_GB2OO' (did you mean 'DGX_GB200'?"),
        (DEVICE.replace("https://", "http://"), "must start with https://"),
    ],
    ids=["devices", "model", "http"],
)
def test_serve_refuses_to_start_on_a_broken_inventory(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    db = f"sqlite:///{tmp_path}/x.db"
    result = devicectl(
        "serve", "--listen", "127.0.0.1:0", "--database-url", db, "--inventory", str(path), check=False
    )
    assert result.returncode != 0 and message in result.stderr, result
    assert "Traceback" not in result.stdout + result.stderr


async def test_an_http_url_from_a_request_model_is_one_clear_error(
    start_controller,
    sink,
    log_capture: LogCapture,  # noqa: F811
) -> None:
    """A device known only from the request's model: the inventory check never saw its URL, and
    the plugin answers with one line (before: "internal error in plugin redfish: ValueError")."""
    h = await start_controller({}, default_plugin="redfish")
    model = {"Model": "DGX_GB200", "Redfish": {"URL": "http://127.0.0.1:9"}}
    error = await _answer(h, sink, ping("elsewhere", "h1", device_model_json=json.dumps(model).encode()))
    assert error == "http://127.0.0.1:9: a BMC is reached over https:// only, never plaintext http://", error
    log_capture.assert_clean()


def test_a_plugin_table_refuses_typos_and_non_finite_timeouts(tmp_path: Path) -> None:
    from controller.plugin_host.launch import load_external_plugins

    path = tmp_path / "inventory.toml"
    for body, message in [
        ("handshake_timout = 3", "plugin[0]: unknown key `handshake_timout` in [plugin]; did you mean"),
        ("handshake_timeout = nan", "plugin[0] (x): handshake_timeout must be a finite number, got nan"),
        ("handshake_timeout = 1e300", "plugin[0] (x): handshake_timeout must be within 0..31536000"),
    ]:
        path.write_text(f'[[plugin]]\nname = "x"\ncommand = ["x"]\n{body}\n')
        with pytest.raises(InventoryError) as info:
            load_external_plugins(path)
        assert str(info.value).startswith(f"{path}: {message}")
