"""Helpers the tests share: fleets, paths, fake exporters and proxies (not tests themselves)."""
