"""The mini-swe-agent adapter and its trajectory reader.

Modules (imported by their full names; this file imports nothing):

- ``adapter``: The mini-swe-agent adapter: ``mini`` headless, its trajectory read into the
  record (``default_bin``, ``override_config``, ``MiniSweAgent``)
- ``trajectory``: Reading a mini-swe-agent trajectory (the JSON its ``-o`` names) as data
  (``Trajectory``, ``read_trajectory``, ``usage_check``)
"""
