"""A real nginx in front of a simulated BMC: a gateway that gives up on slow requests.

nginx runs as a foreground subprocess (`daemon off`, one process) with its own config, logs and
temporary files under a test's tmp directory, on a free port of 127.0.0.1. It terminates TLS with
the simulator's server certificate (issued for 127.0.0.1, so the fleet's CA bundle trusts both) and
proxies HTTPS to the BMC with a short `proxy_read_timeout`: a request the BMC is still working on
gets nginx's own `504 Gateway Timeout`, and a connection the BMC drops after the request its
`502 Bad Gateway`, as in production behind a reverse proxy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bench.ports import free_port as _free_port
from bmcsim import TlsFiles

#: nginx-light's binary (Debian puts it in /usr/sbin, often not on a test runner's PATH)
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)

_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass https://127.0.0.1:{upstream};
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_verify on;
            proxy_ssl_name localhost;  # nginx checks DNS names only; the certificate has both
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout {read_timeout_ms}ms;
            proxy_next_upstream off;
        }}
    }}
}}
"""


def require_nginx() -> str:
    """The nginx binary, or skip the test saying what to install."""
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light): these tests need a real nginx")
    return NGINX


class NginxGateway:
    """A running nginx in front of one BMC; `url` is what the plugin is pointed at."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, directory: Path) -> None:
        self.process = process
        self.port = port
        self.directory = directory

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def errors(self) -> str:
        """nginx's error log so far (what it said about the upstream)."""
        log = self.directory / "error.log"
        return log.read_text() if log.exists() else ""


@asynccontextmanager
async def nginx_gateway(
    upstream_url: str, tls: TlsFiles, directory: Path, *, read_timeout: float = 0.5
) -> AsyncIterator[NginxGateway]:
    """Run nginx in front of `upstream_url` (`https://127.0.0.1:PORT`) until the block ends; it
    serves (and checks the BMC with) the simulator's certificates `tls`."""
    binary = require_nginx()
    port = _free_port()
    config = _configure(directory, port, upstream_url, tls, read_timeout)
    process = subprocess.Popen(
        [binary, "-p", str(directory), "-c", str(config), "-e", str(directory / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    gateway = NginxGateway(process, port, directory)
    try:
        await _listening(gateway)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        if process.stderr is not None:
            process.stderr.close()


def _configure(directory: Path, port: int, upstream_url: str, tls: TlsFiles, read_timeout: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nginx.conf"
    config.write_text(
        _CONFIG.format(
            dir=directory,
            port=port,
            upstream=upstream_url.rsplit(":", 1)[1].rstrip("/"),
            cert=tls.cert,
            key=tls.key,
            ca=tls.ca,
            read_timeout_ms=round(read_timeout * 1000),
        )
    )
    return config


async def _listening(gateway: NginxGateway) -> None:
    """Wait until nginx accepts connections; fail with its own words if it exits instead."""
    process = gateway.process
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(
                f"nginx exited with {process.returncode}: {err.strip()} {gateway.errors().strip()}"
            )
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{gateway.port} within 10 s")
