"""Run DMTF's redfish-service-validator against every simulator model (`make validate-schemas SCHEMAS=DIR`).

The service validator checks every resource against DMTF's CSDL schema files. The project does not ship
them (DMTF publishes them; no package registry we use carries them), so DIR must hold a local copy of
the `csdl/` folder of DMTF's schema bundle (DSP8010, from https://www.dmtf.org/dsp/DSP8010, or the
`csdl` directory of the DMTF/Redfish-Publications repository). The validator runs with `--skipschema`:
it never downloads anything. Exit status 1 when any model reports a FAIL (the goal is 0 FAIL).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bmcsim import DEFAULT_PASSWORD, ensure_tls_files
from tests.conformance.sims import CAPTURE, TARGETS, capture_gb200, start, stop, wait_ready

VALIDATOR = Path(sys.executable).with_name("rf_service_validator")
#: the totals table the validator prints last: | PASS | WARN | FAIL | NOT TESTED |
_TOTALS = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*$", re.M)


def validate(
    name: str, schemas: Path, work: Path, cert_dir: Path, model: str | None = None
) -> tuple[int, int, int] | None:
    """(PASS, WARN, FAIL) of one target, or None when the validator printed no totals."""
    proc, ready = start(name, cert_dir, work, model=model)
    try:
        url = wait_ready(proc, ready)
        cmd = [str(VALIDATOR), "--rhost", url, "--user", "admin", "--password", DEFAULT_PASSWORD]
        cmd += ["--schema_directory", str(schemas), "--skipschema", "--logdir", str(work / f"{name}-logs")]
        env = {**os.environ, "REQUESTS_CA_BUNDLE": str(cert_dir / "ca.pem")}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    finally:
        stop([proc])
    (work / f"{name}.validator.log").write_text(out.stdout + out.stderr)
    totals = _TOTALS.findall(out.stdout)
    if not totals:
        return None
    passed, warned, failed, _ = (int(n) for n in totals[-1])
    return passed, warned, failed


def _replay_of_gb200(work: Path, cert_dir: Path) -> str:
    proc, ready = start("gb200", cert_dir, work)
    try:
        return capture_gb200(wait_ready(proc, ready), cert_dir, work)
    finally:
        stop([proc])


def main(argv: list[str] | None = None) -> int:
    """Validate every target; print one line each; 1 if any FAIL."""
    parser = argparse.ArgumentParser(prog="make validate-schemas", description=__doc__.split("\n")[0])
    parser.add_argument("schemas", type=Path, help="directory with DMTF's CSDL files (*_v1.xml)")
    args = parser.parse_args(argv)
    if not sorted(args.schemas.glob("ServiceRoot_v1.xml")):
        print(
            f"validate-schemas: {args.schemas} holds no DMTF CSDL (ServiceRoot_v1.xml missing)",
            file=sys.stderr,
        )
        return 2
    if not VALIDATOR.exists():
        print("validate-schemas: rf_service_validator is missing: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory(prefix="validate-schemas-") as tmp:
        work = Path(tmp)
        cert_dir = work / "tls"
        ensure_tls_files(cert_dir)
        for name in [*TARGETS, CAPTURE]:
            model = _replay_of_gb200(work, cert_dir) if name == CAPTURE else None
            totals = validate(name, args.schemas.resolve(), work, cert_dir, model)
            if totals is None:
                print(f"{name:12} no result (validator log follows)")
                print((work / f"{name}.validator.log").read_text()[-3000:])
                bad += 1
                continue
            passed, warned, failed = totals
            print(f"{name:12} PASS {passed:5}  WARN {warned:4}  FAIL {failed}", flush=True)
            if failed:
                print((work / f"{name}.validator.log").read_text()[-3000:])
            bad += failed > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
