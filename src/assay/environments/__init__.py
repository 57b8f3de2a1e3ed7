"""Pinned environments: root filesystems named by digest, built from Debian recipes, OCI
layouts, ``docker save`` archives or a Dockerfile subset, kept in a content-addressed store
and run by the sandbox in place of the host's own root."""
