"""The MiniMax Code adapter and its stream reader.

Modules (imported by their full names; this file imports nothing):

- ``adapter``: The MiniMax Code adapter: ``mcode exec`` headless, its stream-json read into the
  record (``provider_config``, ``MCode``)
- ``stream``: Reading a MiniMax Code ``stream-json`` stdout as the headless contract describes
  it (``expected_exit_code``, ``StreamReading``, ``read_stream``, ``usage_check``)
"""
