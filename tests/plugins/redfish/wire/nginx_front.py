"""A real nginx over HTTPS in front of a simulated BMC, as sites put one in front of a Redfish service.

`NginxFront(upstream, tls, workdir)` writes a configuration into `workdir`, runs `nginx` on it as a
foreground subprocess (no daemon, one process, nothing outside `workdir`) on a free port of
127.0.0.1, with the test CA's server certificate, and proxies `location /redfish/v1/` to the
upstream. With a prefix location that ends in a slash, nginx itself answers `/redfish/v1` with a
301 to `/redfish/v1/` (what broke every request of a client that read the 301 as its reply).
`nginx_or_skip()` names the Debian package when nginx is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import pytest

from bench.ports import free_port as _free_port
from bmcsim import TlsFiles
from tests.plugins.redfish.wire.front_process import stop_process, wait_until_listening

_NGINX = "/usr/sbin/nginx"


def nginx_or_skip() -> str:
    """The nginx binary, or a skip that says what to install."""
    binary = shutil.which("nginx") or (_NGINX if Path(_NGINX).exists() else None)
    if binary is None:
        pytest.skip("nginx not installed (Debian: apt-get install nginx-light)")
    return binary


class NginxFront:
    """nginx proxying `https://127.0.0.1:<port>/redfish/v1/...` to `upstream` (`https://host:port`).

    Attributes:
        url: the front's origin, `https://127.0.0.1:<port>`.
        access_log: nginx's access log (one line per request: `"<request line>" <status>`).
    """

    def __init__(self, upstream: str, tls: TlsFiles, workdir: Path) -> None:
        self._binary = nginx_or_skip()
        self._dir = workdir
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.access_log = workdir / "access.log"
        self._error_log = workdir / "error.log"
        self._conf = workdir / "nginx.conf"
        codes = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        temp = "\n".join(f"  {name}_temp_path {workdir / name};" for name in codes)
        # master_process off: one process, which keeps the caller's user (no switch to nobody, so the
        # files in workdir stay writable); the upstream's certificate is not checked (the client's
        # TLS to nginx is what the tests are about)
        self._conf.write_text(
            f"""daemon off;
master_process off;
pid {workdir / "nginx.pid"};
error_log {self._error_log} info;
events {{ worker_connections 64; }}
http {{
  access_log {self.access_log};
{temp}
  server {{
    listen 127.0.0.1:{self.port} ssl;
    ssl_certificate {tls.cert};
    ssl_certificate_key {tls.key};
    location /redfish/v1/ {{
      proxy_pass {upstream};
      proxy_ssl_verify off;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
    }}
  }}
}}
"""
        )
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> NginxFront:
        self._process = subprocess.Popen(
            [self._binary, "-p", str(self._dir), "-e", str(self._error_log), "-c", str(self._conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until_listening(self._process, self.port, self._error_log, "nginx")
        return self

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None

    def requests(self) -> list[str]:
        """`"<request line>" <status>` for each request nginx logged so far."""
        if not self.access_log.exists():
            return []
        out = []
        for line in self.access_log.read_text().splitlines():
            _, quote, rest = line.partition('"')  # combined format: ... "GET /x HTTP/1.1" 301 ...
            request, _, after = rest.partition('"')
            if quote:
                out.append(f'"{request}" {after.split()[0]}')
        return out

    def __enter__(self) -> NginxFront:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
