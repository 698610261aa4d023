from tests.plugins.nvml.conftest import h100x4, make_node  # noqa: F401 (fixtures)
