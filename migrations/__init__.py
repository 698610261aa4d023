"""Alembic migrations for the devicectl database (packaged; applied by `devicectl db upgrade`)."""
