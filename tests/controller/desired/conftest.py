"""Fixtures for desired state, drift, dry run and receipts: the simulator's and the NVML fake's."""

from tests.conftest import db_url, pg_database, store  # noqa: F401 (fixtures)
from tests.plugins.nvml.conftest import h100x4, make_node  # noqa: F401 (fixtures)
from tests.plugins.redfish.conftest import gb200, make_harness, sim_certs  # noqa: F401 (fixtures)
