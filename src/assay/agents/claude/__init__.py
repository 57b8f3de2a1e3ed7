"""The Claude Code adapter and its stream reader.

Modules (imported by their full names; this file imports nothing):

- ``adapter``: The Claude Code adapter: ``claude -p`` headless, its stream-json read into the
  record (``default_bin``, ``config_files``, ``ClaudeCode``)
- ``stream``: Reading Claude Code's ``--output-format stream-json --verbose`` stdout
  (``ClaudeStream``, ``read_stream``, ``usage_check``)
"""
