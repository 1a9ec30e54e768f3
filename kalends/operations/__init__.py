"""Every public operation, declared once. Importing this package registers them."""

from kalends.operations import organizations, profiles

__all__ = ["organizations", "profiles"]
