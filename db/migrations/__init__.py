"""Ordered SQL migrations, shipped as package data."""
