"""Build the Go host and the Go plugin at test time, against HashiCorp's go-plugin from Debian.

Go stubs come from *our* `proto/` files (protoc + protoc-gen-go), so what the Go side speaks is
exactly what our Python side serves; no code of Nomad's is involved. Everything resolves offline
from Debian's Go source packages (GOPATH mode, `/usr/share/gocode`):

    apt-get install golang-go protobuf-compiler golang-goprotobuf-dev \\
        golang-github-hashicorp-go-plugin-dev golang-google-grpc-dev \\
        golang-github-hashicorp-hcl-v2-dev golang-github-zclconf-go-cty-dev
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PROTO = ROOT / "proto"
GOCODE = Path("/usr/share/gocode/src")
PKG = "devicectltest"

#: Go import path of each of our proto files, and of the well-known types they use
_GO_PACKAGES = {
    "nomad/plugins/base/base.proto": "pb/base",
    "nomad/plugins/device/device.proto": "pb/device",
    "nomad/plugins/shared/hclspec/hcl_spec.proto": "pb/hclspec",
    "nomad/plugins/shared/structs/attribute.proto": "pb/structs",
    "nomad/plugins/shared/structs/stats.proto": "pb/structs",
    # go-plugin brings its own controller and broker stubs (the same proto names); only stdio,
    # which Debian's go-plugin 1.0.1 predates, comes from ours
    "goplugin/grpc_stdio.proto": "pb/goplugin",
}
_WELL_KNOWN = {
    "google/protobuf/duration.proto": "github.com/golang/protobuf/ptypes/duration",
    "google/protobuf/timestamp.proto": "github.com/golang/protobuf/ptypes/timestamp",
    "google/protobuf/wrappers.proto": "github.com/golang/protobuf/ptypes/wrappers",
    "google/protobuf/empty.proto": "github.com/golang/protobuf/ptypes/empty",
}
#: Debian packages providing the tools
_TOOLS = {"go": "golang-go", "protoc": "protobuf-compiler", "protoc-gen-go": "golang-goprotobuf-dev"}
#: Debian source packages the build needs, by a directory each provides
_SOURCES = {
    "github.com/hashicorp/go-plugin": "golang-github-hashicorp-go-plugin-dev",
    "google.golang.org/grpc": "golang-google-grpc-dev",
    "github.com/golang/protobuf/proto": "golang-goprotobuf-dev",
    "github.com/hashicorp/hcl/v2": "golang-github-hashicorp-hcl-v2-dev",
    "github.com/zclconf/go-cty/cty/msgpack": "golang-github-zclconf-go-cty-dev",
}


@dataclass(frozen=True)
class Built:
    host: Path
    plugin: Path


def missing() -> str | None:
    """Why the Go side cannot be built here (a tool or package is missing), or None."""
    lacking = [deb for tool, deb in _TOOLS.items() if shutil.which(tool) is None]
    lacking += [deb for path, deb in _SOURCES.items() if not (GOCODE / path).is_dir()]
    if not lacking:
        return None
    packages = " ".join(sorted(set(lacking)))
    return f"the go-plugin tests need Go and Debian's Go sources: apt-get install {packages}"


def _protoc_include() -> Path:
    from grpc_tools import protoc  # the well-known .proto files ship with grpcio-tools

    return Path(protoc.__file__).parent / "_proto"


def build(work: Path) -> Built:
    """Generate the stubs and build both programs under `work`; raises CalledProcessError."""
    src = work / "gopath" / "src" / PKG
    for sub in ("host", "plugin"):
        (src / sub).mkdir(parents=True, exist_ok=True)
        for source in (HERE / sub).glob("*.go"):
            shutil.copy(source, src / sub / source.name)
    mapping = ",".join(
        [f"M{proto}={PKG}/{pkg}" for proto, pkg in _GO_PACKAGES.items()]
        + [f"M{proto}={pkg}" for proto, pkg in _WELL_KNOWN.items()]
    )
    staging = work / "protoc"
    staging.mkdir(exist_ok=True)
    for package in sorted(set(_GO_PACKAGES.values())):  # protoc-gen-go 1.3: one package per run
        sources = [proto for proto, pkg in _GO_PACKAGES.items() if pkg == package]
        subprocess.run(
            [
                "protoc",
                f"-I{PROTO}",
                f"-I{_protoc_include()}",
                f"--go_out=plugins=grpc,{mapping}:{staging}",
                *sources,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        # it writes next to the .proto's own path; the package lives at its import path
        (src / package).mkdir(parents=True, exist_ok=True)
        for proto in sources:
            generated = staging / proto.replace(".proto", ".pb.go")
            shutil.move(generated, src / package / generated.name)
    env = {
        **os.environ,
        "GO111MODULE": "off",  # GOPATH mode: Debian's sources, no module downloads
        "GOPATH": f"{work / 'gopath'}:{GOCODE.parent}",
        "GOFLAGS": "",
        "GOPROXY": "off",
    }
    env.setdefault("GOCACHE", str(Path.home() / ".cache" / "go-build"))
    out = Built(work / "gohost", work / "goplugin")
    for sub, binary in (("host", out.host), ("plugin", out.plugin)):
        subprocess.run(
            ["go", "build", "-o", str(binary), "."],
            cwd=src / sub,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return out
