"""The connector plugins a worker offers."""
