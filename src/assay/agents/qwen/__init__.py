"""The Qwen Code adapter and its stream reader.

Modules (imported by their full names; this file imports nothing):

- ``adapter``: The qwen-code adapter: ``qwen --auth-type openai --yolo -o stream-json``
  headless, its JSONL read into the execution record (``agents_dir``, ``default_bin``,
  ``node22_dir``, ``install_prefix``, ...)
- ``stream``: Reading qwen-code's ``-o stream-json`` output: JSONL of ``system``, ``assistant``,
  ``user``, ``stream_event`` messages ending in one ``result`` (``subtype`` ``success`` or
  ``error_during_execution``, ``is_error``, ``num_turns``, ``usage``) (``QwenReading``,
  ``read_stream``, ``usage_check``)
"""
