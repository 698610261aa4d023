"""Alembic revision scripts (a package so that wheels always ship them)."""
